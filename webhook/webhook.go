// Package webhook signs and verifies Tally webhook deliveries. Receivers
// written in Go import it to check the X-Tally-Signature header:
//
//	err := webhook.Verify(secret, r.Header.Get(webhook.SignatureHeader), body, webhook.DefaultTolerance)
//
// or, in a net/http handler, let VerifyRequest read and check the body:
//
//	body, err := webhook.VerifyRequest(secret, r, webhook.DefaultTolerance)
//
// The header is "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">".
// More than one v1 may be present (while a secret is being rotated); a
// delivery is genuine when any of them matches.
//
// A subscription with "signatureScheme": "standard-webhooks" is signed as
// the Standard Webhooks specification says instead; VerifyStandard checks
// those (HMAC with the whsec_ secret, or Ed25519 with the whpk_ public
// key), and VerifyRequest checks either scheme.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header names of every delivery.
const (
	SignatureHeader = "X-Tally-Signature"
	EventHeader     = "X-Tally-Event"
	WebhookIDHeader = "X-Tally-Webhook-Id"
)

// DefaultTolerance is how far a signature's timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// MaxBodyBytes is the largest body VerifyRequest reads. Deliveries are far
// smaller.
const MaxBodyBytes = 1 << 20

// Errors returned by Verify and VerifyRequest; test them with errors.Is.
var (
	// ErrMalformedHeader: the header is empty or is not
	// "t=<unix>,v1=<hex>[,v1=<hex>...]" (other scheme pairs such as v0=...
	// are allowed and ignored).
	ErrMalformedHeader = errors.New("webhook: malformed signature header")
	// ErrTimestampOutOfTolerance: t is more than the tolerance before or
	// after now (a replay, or a badly wrong clock).
	ErrTimestampOutOfTolerance = errors.New("webhook: signature timestamp outside tolerance")
	// ErrNoMatchingSignature: no v1 value is the signature of this body
	// with this secret (wrong secret, or the body was altered).
	ErrNoMatchingSignature = errors.New("webhook: no matching signature")
	// ErrEmptySecret: Verify was called with an empty secret. Anyone can
	// compute a signature with an empty key, so it is always refused; it
	// usually means the secret was not configured.
	ErrEmptySecret = errors.New("webhook: empty secret")
)

// Sign returns the X-Tally-Signature value for body signed at t.
func Sign(secret string, t time.Time, body []byte) string {
	return SignEach([]string{secret}, t, body)
}

// SignEach returns the X-Tally-Signature value for body signed at t with
// each secret: one v1 per secret, in order. Tally signs with two secrets
// while a subscription's secret is being rotated, so receivers holding
// either accept the delivery.
func SignEach(secrets []string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=" + ts)
	for _, secret := range secrets {
		b.WriteString(",v1=" + hex.EncodeToString(mac(secret, ts, body)))
	}
	return b.String()
}

// Verify checks header (the X-Tally-Signature value) against the raw
// request body, exactly as received, before any JSON decoding.
//
// It returns nil when the header is well formed, its timestamp is within
// tolerance of now in either direction (a difference of exactly tolerance
// is accepted), and at least one of its v1 values is the HMAC-SHA256 of
// "<t>.<body>" keyed with secret. Every v1 value is compared with
// hmac.Equal (constant time).
//
// A tolerance <= 0 means DefaultTolerance: the timestamp is always
// checked, since without it a captured delivery could be replayed forever.
func Verify(secret, header string, body []byte, tolerance time.Duration) error {
	return verifyAt(secret, header, body, tolerance, time.Now())
}

// VerifyRequest reads r's body (at most MaxBodyBytes), verifies it and
// returns it. A request with X-Tally-Signature is checked with Verify; one
// with only the Standard Webhooks headers with VerifyStandard, secret then
// being the whsec_ secret or the whpk_ public key. The body is consumed;
// decode the returned bytes. A body over the limit yields an error
// wrapping *http.MaxBytesError.
func VerifyRequest(secret string, r *http.Request, tolerance time.Duration) ([]byte, error) {
	if r.Header.Get(SignatureHeader) == "" && r.Header.Get(StandardSignatureHeader) != "" {
		return VerifyStandardRequest(secret, r, tolerance)
	}
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if err := Verify(secret, r.Header.Get(SignatureHeader), body, tolerance); err != nil {
		return nil, err
	}
	return body, nil
}

// maxTimestamp keeps time.Unix far from int64 overflow; anything larger is
// out of any tolerance anyway.
const maxTimestamp = 1 << 62

// verifyAt is Verify with the clock passed in (tests use it).
func verifyAt(secret, header string, body []byte, tolerance time.Duration, now time.Time) error {
	if secret == "" {
		return ErrEmptySecret
	}
	ts, sigs, err := parseHeader(header)
	if err != nil {
		return err
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMalformedHeader // out of int64 range; parseHeader checked the digits
	}
	if sec > maxTimestamp {
		return ErrTimestampOutOfTolerance
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return ErrTimestampOutOfTolerance
	}
	// The signed string uses t exactly as it appears in the header.
	expected := mac(secret, ts, body)
	match := false
	for _, s := range sigs {
		got, err := hex.DecodeString(s)
		if err != nil {
			got = nil // not hex: cannot match, still compared
		}
		if hmac.Equal(expected, got) {
			match = true
		}
	}
	if !match {
		return ErrNoMatchingSignature
	}
	return nil
}

// parseHeader splits "t=<digits>,v1=<sig>[,...]" into the t digits and the
// v1 values. Pairs may have spaces around them; unknown keys are ignored.
// It fails on an empty pair, a pair without '=' or with an empty key, a
// missing, repeated or non-decimal t, and when there is no v1.
func parseHeader(header string) (ts string, sigs []string, err error) {
	seenT := false
	for pair := range strings.SplitSeq(header, ",") {
		key, value, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || key == "" {
			return "", nil, ErrMalformedHeader
		}
		switch key {
		case "t":
			if seenT || !isDigits(value) {
				return "", nil, ErrMalformedHeader
			}
			seenT, ts = true, value
		case "v1":
			sigs = append(sigs, value)
		}
	}
	if !seenT || len(sigs) == 0 {
		return "", nil, ErrMalformedHeader
	}
	return ts, sigs, nil
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

func mac(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte("."))
	m.Write(body)
	return m.Sum(nil)
}
