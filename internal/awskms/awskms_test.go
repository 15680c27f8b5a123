package awskms_test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/tally-hq/tally/internal/awskms"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/secretbox/secretboxtest"
	"github.com/tally-hq/tally/internal/testenv"
)

// KMS cannot run here: a loopback server answers KMS's JSON protocol with
// secretboxtest.FakeKMS, and refuses requests not signed for kms with the
// function's credentials or naming another key.
func TestKeyWrapsWithKMSJSONProtocol(t *testing.T) {
	const arn = "arn:aws:kms:eu-west-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	fake := secretboxtest.New()
	srv := secretboxtest.KMSServer(t, fake, "eu-west-1", arn)
	cfg := aws.Config{Region: "eu-west-1", Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", "")}
	key := awskms.New(cfg, arn, srv.URL)
	st := testenv.Bolt(t)
	sub := keys.Subscription("brd_a", "sub_01")
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	sealed, err := secretbox.New(st, key).Seal(t.Context(), secret, sub)
	if err != nil {
		t.Fatal(err)
	}
	// Another process unwraps the stored data key with KMS Decrypt.
	if got, err := secretbox.New(st, key).Open(t.Context(), sealed, sub); err != nil || got != secret {
		t.Errorf("Open = %q, %v", got, err)
	}
	if fake.Generated.Load() != 1 || fake.Decrypted.Load() != 1 {
		t.Errorf("KMS saw %d GenerateDataKey and %d Decrypt, want 1 each", fake.Generated.Load(), fake.Decrypted.Load())
	}
	if _, err := key.Decrypt(context.Background(), []byte("not a wrapped key")); err == nil || !strings.Contains(err.Error(), "InvalidCiphertextException") {
		t.Errorf("Decrypt of garbage: %v, want KMS's error", err)
	}
	other := awskms.New(cfg, arn+"-other", srv.URL)
	if _, _, err := other.GenerateDataKey(context.Background()); err == nil || !strings.Contains(err.Error(), "NotFoundException") {
		t.Errorf("GenerateDataKey with another key: %v, want KMS's error", err)
	}
}
