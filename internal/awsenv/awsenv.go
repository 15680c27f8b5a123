// Package awsenv configures the AWS SDK's clients of a Lambda function from
// the environment Lambda gives it: the region (AWS_REGION), the execution
// role's credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
// AWS_SESSION_TOKEN) and, for emulators, the SDK's standard endpoint
// variables (AWS_ENDPOINT_URL_<SERVICE>, then AWS_ENDPOINT_URL). That is
// what config.LoadDefaultConfig finds in a function, without linking the
// shared config files, SSO, STS and the other credential sources a function
// never uses (and without their init time). The CLI, which people run with
// profiles and SSO, keeps the SDK's full chain.
package awsenv

import (
	"errors"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
)

// Config returns the region and credentials of the environment.
func Config() (aws.Config, error) {
	region := os.Getenv("AWS_REGION")
	if region == "" {
		region = os.Getenv("AWS_DEFAULT_REGION")
	}
	id, secret := os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
	switch {
	case region == "":
		return aws.Config{}, errors.New("AWS_REGION is not set")
	case id == "" || secret == "":
		return aws.Config{}, errors.New("AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set (Lambda sets them from the function's role)")
	}
	return aws.Config{
		Region:      region,
		Credentials: aws.NewCredentialsCache(credentials.NewStaticCredentialsProvider(id, secret, os.Getenv("AWS_SESSION_TOKEN"))),
	}, nil
}

// Endpoint returns the endpoint the environment sets for the service whose
// environment name is service ("DYNAMODB", "SQS", "SFN"):
// AWS_ENDPOINT_URL_<service>, else AWS_ENDPOINT_URL; nil when neither is
// set (the service's own endpoint), or when
// AWS_IGNORE_CONFIGURED_ENDPOINT_URLS is true.
func Endpoint(service string) *string {
	if strings.EqualFold(os.Getenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"), "true") {
		return nil
	}
	for _, name := range []string{"AWS_ENDPOINT_URL_" + service, "AWS_ENDPOINT_URL"} {
		if v := os.Getenv(name); v != "" {
			return aws.String(v)
		}
	}
	return nil
}
