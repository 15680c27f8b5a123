// Package secretboxtest stands in for KMS in tests: KMS cannot run here, so
// FakeKMS wraps data keys with AES-GCM under a master key of its own, as
// KMS does under the stack's key, and counts the calls a process would
// make; KMSServer serves a wrapper over KMS's JSON protocol on loopback,
// for the functions' binaries.
package secretboxtest

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// FakeKMS is a secretbox.Wrapper whose wrapped keys only it unwraps.
type FakeKMS struct {
	aead cipher.AEAD
	// Generated and Decrypted count the GenerateDataKey and Decrypt calls.
	Generated, Decrypted atomic.Int64
}

// New returns a FakeKMS with a master key of its own.
func New() *FakeKMS {
	master := make([]byte, 32)
	_, _ = rand.Read(master)
	block, _ := aes.NewCipher(master)
	aead, _ := cipher.NewGCM(block)
	return &FakeKMS{aead: aead}
}

func (k *FakeKMS) GenerateDataKey(context.Context) (plain, wrapped []byte, err error) {
	k.Generated.Add(1)
	plain, nonce := make([]byte, 32), make([]byte, k.aead.NonceSize())
	_, _ = rand.Read(plain)
	_, _ = rand.Read(nonce)
	return plain, k.aead.Seal(nonce, nonce, plain, nil), nil
}

func (k *FakeKMS) Decrypt(_ context.Context, wrapped []byte) ([]byte, error) {
	k.Decrypted.Add(1)
	n := k.aead.NonceSize()
	if len(wrapped) < n {
		return nil, errors.New("fake KMS: InvalidCiphertextException")
	}
	plain, err := k.aead.Open(nil, wrapped[:n], wrapped[n:], nil)
	if err != nil {
		return nil, errors.New("fake KMS: InvalidCiphertextException")
	}
	return plain, nil
}

// Wrapper is secretbox.Wrapper (not imported: secretbox's tests use this
// package).
type Wrapper interface {
	GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error)
	Decrypt(ctx context.Context, wrapped []byte) ([]byte, error)
}

// KMSServer answers KMS's JSON protocol (GenerateDataKey, Decrypt) on
// loopback with w, for the key arn in region: what package awskms calls.
// A request not signed with SigV4 for kms in region, or naming another
// key, is refused as KMS would.
func KMSServer(t testing.TB, w Wrapper, region, arn string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		refuse := func(typ string) {
			rw.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(rw).Encode(map[string]string{"__type": typ, "message": typ})
		}
		var in struct {
			KeyId, KeySpec string
			CiphertextBlob []byte
		}
		body, _ := io.ReadAll(r.Body)
		auth := r.Header.Get("Authorization")
		if !strings.HasPrefix(auth, "AWS4-HMAC-SHA256 Credential=") || !strings.Contains(auth, "/"+region+"/kms/aws4_request") ||
			r.Header.Get("Content-Type") != "application/x-amz-json-1.1" || json.Unmarshal(body, &in) != nil {
			refuse("IncompleteSignatureException")
			return
		}
		if in.KeyId != arn {
			refuse("NotFoundException")
			return
		}
		var out map[string]any
		switch r.Header.Get("X-Amz-Target") {
		case "TrentService.GenerateDataKey":
			plain, wrapped, err := w.GenerateDataKey(r.Context())
			if err != nil || in.KeySpec != "AES_256" {
				refuse("ValidationException")
				return
			}
			out = map[string]any{"KeyId": arn, "Plaintext": plain, "CiphertextBlob": wrapped}
		case "TrentService.Decrypt":
			plain, err := w.Decrypt(r.Context(), in.CiphertextBlob)
			if err != nil {
				refuse("InvalidCiphertextException")
				return
			}
			out = map[string]any{"KeyId": arn, "Plaintext": plain}
		default:
			refuse("UnknownOperationException")
			return
		}
		_ = json.NewEncoder(rw).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}
