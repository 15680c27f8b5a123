package webhook

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of the Standard Webhooks scheme (https://www.standardwebhooks.com),
// which a subscription chooses with "signatureScheme": "standard-webhooks".
const (
	StandardIDHeader        = "Webhook-Id"        // the delivery id, wh_…
	StandardTimestampHeader = "Webhook-Timestamp" // unix seconds
	StandardSignatureHeader = "Webhook-Signature" // "v1,<base64>" or "v1a,<base64>", space-separated
)

// Key prefixes of the Standard Webhooks scheme: an HMAC secret, an Ed25519
// public key (what receivers hold) and an Ed25519 secret key (what signs).
const (
	SecretPrefix     = "whsec_"
	PublicKeyPrefix  = "whpk_"
	SigningKeyPrefix = "whsk_"
)

// Bounds of a whsec_ secret's key, in bytes (Standard Webhooks).
const (
	MinSecretBytes = 24
	MaxSecretBytes = 64
)

// ErrMalformedKey: a Standard Webhooks key is not whsec_ + base64 of 24 to
// 64 bytes, whpk_ + base64 of an Ed25519 public key, or whsk_ + base64 of
// an Ed25519 seed.
var ErrMalformedKey = errors.New("webhook: malformed key")

// SignStandard returns the webhook-signature value of a delivery signed at t
// with each key, in order, space-separated: "v1,<base64 HMAC-SHA256>" for a
// whsec_ secret, "v1a,<base64 Ed25519 signature>" for a whsk_ key, each of
// "<id>.<t>.<body>".
func SignStandard(keys []string, id string, t time.Time, body []byte) (string, error) {
	msg := standardMessage(id, strconv.FormatInt(t.Unix(), 10), body)
	sigs := make([]string, 0, len(keys))
	for _, k := range keys {
		switch {
		case strings.HasPrefix(k, SecretPrefix):
			key, err := decodeSecret(k)
			if err != nil {
				return "", err
			}
			sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(hmacOf(key, msg)))
		case strings.HasPrefix(k, SigningKeyPrefix):
			seed, err := decodeKey(k, SigningKeyPrefix, ed25519.SeedSize)
			if err != nil {
				return "", err
			}
			sig := ed25519.Sign(ed25519.NewKeyFromSeed(seed), msg)
			sigs = append(sigs, "v1a,"+base64.StdEncoding.EncodeToString(sig))
		default:
			return "", ErrMalformedKey
		}
	}
	return strings.Join(sigs, " "), nil
}

// VerifyStandard checks a Standard Webhooks delivery: its webhook-id,
// webhook-timestamp and webhook-signature values against the raw body.
// key is the subscription's whsec_ secret (v1 signatures are checked) or
// its whpk_ public key (v1a signatures are checked). It returns nil when
// the timestamp is within tolerance of now (<= 0: DefaultTolerance) and
// one signature of the key's kind matches; the errors are those of Verify,
// and ErrMalformedKey.
func VerifyStandard(key, id, timestamp, signatures string, body []byte, tolerance time.Duration) error {
	return verifyStandardAt(key, id, timestamp, signatures, body, tolerance, time.Now())
}

// VerifyStandardRequest is VerifyRequest for the Standard Webhooks scheme.
func VerifyStandardRequest(key string, r *http.Request, tolerance time.Duration) ([]byte, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	h := r.Header
	if err := VerifyStandard(key, h.Get(StandardIDHeader), h.Get(StandardTimestampHeader), h.Get(StandardSignatureHeader), body, tolerance); err != nil {
		return nil, err
	}
	return body, nil
}

func verifyStandardAt(key, id, timestamp, signatures string, body []byte, tolerance time.Duration, now time.Time) error {
	var (
		version string
		check   func(msg, sig []byte) bool
	)
	switch {
	case key == "":
		return ErrEmptySecret
	case strings.HasPrefix(key, SecretPrefix):
		secret, err := decodeSecret(key)
		if err != nil {
			return err
		}
		version = "v1"
		check = func(msg, sig []byte) bool { return hmac.Equal(hmacOf(secret, msg), sig) }
	case strings.HasPrefix(key, PublicKeyPrefix):
		pub, err := decodeKey(key, PublicKeyPrefix, ed25519.PublicKeySize)
		if err != nil {
			return err
		}
		version = "v1a"
		check = func(msg, sig []byte) bool { return ed25519.Verify(pub, msg, sig) }
	default:
		return ErrMalformedKey
	}
	if id == "" || !isDigits(timestamp) || strings.TrimSpace(signatures) == "" {
		return ErrMalformedHeader
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil || sec > maxTimestamp {
		return ErrTimestampOutOfTolerance
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestampOutOfTolerance
	}
	msg := standardMessage(id, timestamp, body)
	match := false
	for _, s := range strings.Fields(signatures) {
		v, value, ok := strings.Cut(s, ",")
		if !ok || v != version {
			continue // another scheme's or version's signature
		}
		sig, err := base64.StdEncoding.DecodeString(value)
		if err == nil && check(msg, sig) {
			match = true
		}
	}
	if !match {
		return ErrNoMatchingSignature
	}
	return nil
}

// PublicKey returns the whpk_ public key of a whsk_ signing key.
func PublicKey(signingKey string) (string, error) {
	seed, err := decodeKey(signingKey, SigningKeyPrefix, ed25519.SeedSize)
	if err != nil {
		return "", err
	}
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	return PublicKeyPrefix + base64.StdEncoding.EncodeToString(pub), nil
}

// CheckSecret says whether secret is a whsec_ secret: the prefix, then
// standard base64 of MinSecretBytes to MaxSecretBytes bytes.
func CheckSecret(secret string) error {
	_, err := decodeSecret(secret)
	return err
}

func decodeSecret(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, SecretPrefix))
	if !strings.HasPrefix(secret, SecretPrefix) || err != nil || len(key) < MinSecretBytes || len(key) > MaxSecretBytes {
		return nil, fmt.Errorf("%w: want %s and base64 of %d to %d bytes", ErrMalformedKey, SecretPrefix, MinSecretBytes, MaxSecretBytes)
	}
	return key, nil
}

func decodeKey(key, prefix string, size int) ([]byte, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(key, prefix))
	if !strings.HasPrefix(key, prefix) || err != nil || len(b) != size {
		return nil, fmt.Errorf("%w: want %s and base64 of %d bytes", ErrMalformedKey, prefix, size)
	}
	return b, nil
}

func standardMessage(id, timestamp string, body []byte) []byte {
	msg := make([]byte, 0, len(id)+len(timestamp)+2+len(body))
	msg = append(msg, id...)
	msg = append(msg, '.')
	msg = append(msg, timestamp...)
	msg = append(msg, '.')
	return append(msg, body...)
}

func hmacOf(key, msg []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(msg)
	return m.Sum(nil)
}

// readBody reads r's body, at most MaxBodyBytes.
func readBody(r *http.Request) ([]byte, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, MaxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("webhook: reading body: %w", err)
	}
	return body, nil
}
