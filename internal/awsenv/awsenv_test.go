package awsenv_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tally-hq/tally/internal/awsenv"
)

func TestConfig(t *testing.T) {
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_DEFAULT_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "AKID")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "SECRET")
	t.Setenv("AWS_SESSION_TOKEN", "TOKEN")
	cfg, err := awsenv.Config()
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(t.Context())
	if err != nil || cfg.Region != "eu-west-1" || creds.AccessKeyID != "AKID" || creds.SecretAccessKey != "SECRET" || creds.SessionToken != "TOKEN" {
		t.Errorf("config %s, credentials %+v (%v)", cfg.Region, creds, err)
	}
	t.Setenv("AWS_REGION", "")
	if cfg, _ := awsenv.Config(); cfg.Region != "us-east-1" {
		t.Errorf("region %q, want AWS_DEFAULT_REGION's", cfg.Region)
	}
	t.Setenv("AWS_DEFAULT_REGION", "")
	if _, err := awsenv.Config(); err == nil {
		t.Error("no region is no error")
	}
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	if _, err := awsenv.Config(); err == nil {
		t.Error("no credentials is no error")
	}
}

func TestEndpoint(t *testing.T) {
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_ENDPOINT_URL_SQS", "")
	t.Setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "")
	if e := awsenv.Endpoint("SQS"); e != nil {
		t.Errorf("endpoint %q with nothing set", *e)
	}
	t.Setenv("AWS_ENDPOINT_URL", "http://all:1")
	if e := aws.ToString(awsenv.Endpoint("SQS")); e != "http://all:1" {
		t.Errorf("endpoint %q, want AWS_ENDPOINT_URL's", e)
	}
	t.Setenv("AWS_ENDPOINT_URL_SQS", "http://sqs:2")
	if e := aws.ToString(awsenv.Endpoint("SQS")); e != "http://sqs:2" {
		t.Errorf("endpoint %q, want AWS_ENDPOINT_URL_SQS's", e)
	}
	if e := aws.ToString(awsenv.Endpoint("SFN")); e != "http://all:1" {
		t.Errorf("SFN endpoint %q, want AWS_ENDPOINT_URL's", e)
	}
	t.Setenv("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "true")
	if e := awsenv.Endpoint("SQS"); e != nil {
		t.Errorf("endpoint %q though configured endpoints are ignored", *e)
	}
}
