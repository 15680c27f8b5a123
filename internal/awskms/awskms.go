// Package awskms wraps the data key that seals webhook signing secrets
// (package secretbox) with a KMS key of the stack, over KMS's JSON
// protocol (package awsjson: the SDK's KMS client put the webhooks and
// dashboard functions past their size bounds). Only the functions that
// sign or set secrets link it (internal/lambdacheck).
package awskms

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tally-hq/tally/internal/awsenv"
	"github.com/tally-hq/tally/internal/awsjson"
)

// EnvKeyARN names the KMS key that wraps the data key: set for the
// functions that sign or set webhook signing secrets.
const EnvKeyARN = "TALLY_SECRETS_KEY_ARN"

// Key is a secretbox.Wrapper over one KMS key.
type Key struct {
	arn      string
	endpoint string
	json     *awsjson.Client
}

// FromEnv is the Key EnvKeyARN names, called with the function's role
// (awsenv) at KMS's endpoint in its region (or AWS_ENDPOINT_URL_KMS). It
// makes no call.
func FromEnv() (Key, error) {
	arn := os.Getenv(EnvKeyARN)
	if arn == "" {
		return Key{}, fmt.Errorf("%s is not set: the function signs or sets webhook signing secrets, sealed with that KMS key", EnvKeyARN)
	}
	cfg, err := awsenv.Config()
	if err != nil {
		return Key{}, err
	}
	endpoint := "https://kms." + cfg.Region + ".amazonaws.com/"
	if e := awsenv.Endpoint("KMS"); e != nil {
		endpoint = *e
	}
	return New(cfg, arn, endpoint), nil
}

// New is the Key arn names, called at endpoint with cfg's region and
// credentials, each call tried 3 times as the SDK's standard retryer does.
func New(cfg aws.Config, arn, endpoint string) Key {
	return Key{arn: arn, endpoint: endpoint,
		json: awsjson.New(cfg, awsjson.Protocol{Service: "kms", Target: "TrentService", ContentType: "application/x-amz-json-1.1"}, 3)}
}

func (k Key) GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error) {
	var out struct{ Plaintext, CiphertextBlob []byte }
	err = k.json.Call(ctx, k.endpoint, "GenerateDataKey", map[string]string{"KeyId": k.arn, "KeySpec": "AES_256"}, &out)
	return out.Plaintext, out.CiphertextBlob, err
}

func (k Key) Decrypt(ctx context.Context, wrapped []byte) ([]byte, error) {
	var out struct{ Plaintext []byte }
	err := k.json.Call(ctx, k.endpoint, "Decrypt", map[string]any{"KeyId": k.arn, "CiphertextBlob": wrapped}, &out)
	return out.Plaintext, err
}
