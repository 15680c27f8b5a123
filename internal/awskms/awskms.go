// Package awskms wraps the data key that seals webhook signing secrets
// (package secretbox) with a KMS key of the stack. It calls KMS's JSON API
// itself, signed with the SDK's SigV4 signer, rather than through the SDK's
// KMS client: of the client's many operations it needs two, and the client
// would add 0.44 MiB to the webhooks function and 1.1 MiB to the dashboard
// (whose html/template keeps every method of a linked type), past their
// size bounds (internal/lambdacheck). Only the functions that sign or set
// secrets link it.
package awskms

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/tally-hq/tally/internal/awsenv"
)

// EnvKeyARN names the KMS key that wraps the data key: set for the
// functions that sign or set webhook signing secrets.
const EnvKeyARN = "TALLY_SECRETS_KEY_ARN"

// Key is a secretbox.Wrapper over one KMS key.
type Key struct {
	arn      string
	endpoint string
	cfg      aws.Config
	signer   *v4.Signer
	client   *http.Client
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
// credentials.
func New(cfg aws.Config, arn, endpoint string) Key {
	return Key{arn: arn, endpoint: endpoint, cfg: cfg, signer: v4.NewSigner(), client: &http.Client{Timeout: 10 * time.Second}}
}

func (k Key) GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error) {
	var out struct{ Plaintext, CiphertextBlob []byte }
	err = k.call(ctx, "GenerateDataKey", map[string]string{"KeyId": k.arn, "KeySpec": "AES_256"}, &out)
	return out.Plaintext, out.CiphertextBlob, err
}

func (k Key) Decrypt(ctx context.Context, wrapped []byte) ([]byte, error) {
	var out struct{ Plaintext []byte }
	err := k.call(ctx, "Decrypt", map[string]any{"KeyId": k.arn, "CiphertextBlob": wrapped}, &out)
	return out.Plaintext, err
}

// call makes one KMS request (its JSON 1.1 protocol: blobs in base64).
func (k Key) call(ctx context.Context, operation string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.endpoint, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-amz-json-1.1")
	req.Header.Set("X-Amz-Target", "TrentService."+operation)
	creds, err := k.cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(body)
	if err := k.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "kms", k.cfg.Region, time.Now()); err != nil {
		return err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return fmt.Errorf("kms %s: %w", operation, err)
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return fmt.Errorf("kms %s: %w", operation, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Type    string `json:"__type"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(answer, &e)
		return fmt.Errorf("kms %s: %d %s: %s", operation, resp.StatusCode, e.Type, e.Message)
	}
	return json.Unmarshal(answer, out)
}
