package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v85/webhook"
)

const testSecret = "whsec_test"

var (
	testBody = []byte(`{"id":"evt_01","event":"webhook.test"}`)
	testNow  = time.Unix(1700000000, 0)
)

// header builds a header with t = sec and the correct v1 for body.
func header(secret string, sec int64, body []byte) string {
	return Sign(secret, time.Unix(sec, 0), body)
}

func TestSignKnownVector(t *testing.T) {
	// Expected values computed independently with
	// printf '%s' '1700000000.<body>' | openssl dgst -sha256 -hmac '<secret>' -hex
	tests := []struct {
		secret string
		body   []byte
		want   string
	}{
		{testSecret, testBody, "t=1700000000,v1=8e677021833e50c90ef777a1312b749ab4fef145af3fdcd9df5b0365489e0d9b"},
		{"k", nil, "t=1700000000,v1=5c2999a43333a6877f49c8003f235c4f6de40f85b1b7414b70bd470a8db53d97"},
	}
	for _, tc := range tests {
		if got := Sign(tc.secret, testNow, tc.body); got != tc.want {
			t.Errorf("Sign(%q, %d, %q) = %q, want %q", tc.secret, testNow.Unix(), tc.body, got, tc.want)
		}
	}
}

func TestSignVerifyRoundTrip(t *testing.T) {
	bodies := [][]byte{nil, {}, testBody, []byte("not json, \x00 binary \xff"), bytes.Repeat([]byte("a"), 64<<10)}
	secrets := []string{testSecret, "x", strings.Repeat("long-secret-", 20)}
	for _, secret := range secrets {
		for _, body := range bodies {
			h := Sign(secret, time.Now(), body)
			if err := Verify(secret, h, body, DefaultTolerance); err != nil {
				t.Errorf("Verify(Sign(...)) secret=%.10q body len %d: %v", secret, len(body), err)
			}
		}
	}
}

// Independent implementation: stripe-go signs and verifies "<t>.<payload>"
// with HMAC-SHA256 and a "t=...,v1=..." header, the same scheme.
func TestStripeValidatesOurSignature(t *testing.T) {
	for _, body := range [][]byte{testBody, {}, []byte("x")} {
		h := Sign(testSecret, time.Now(), body)
		if err := stripewebhook.ValidatePayloadWithTolerance(body, h, testSecret, DefaultTolerance); err != nil {
			t.Errorf("stripe rejects our header %q for body %q: %v", h, body, err)
		}
		// And stripe agrees on the obvious rejections.
		if err := stripewebhook.ValidatePayloadWithTolerance(append(body, '!'), h, testSecret, DefaultTolerance); err == nil {
			t.Errorf("stripe accepts a tampered body")
		}
		if err := stripewebhook.ValidatePayloadWithTolerance(body, h, testSecret+"x", DefaultTolerance); err == nil {
			t.Errorf("stripe accepts a wrong secret")
		}
	}
}

func TestVerifyAcceptsStripeSignedPayload(t *testing.T) {
	for _, ts := range []time.Time{{}, time.Now().Add(-4 * time.Minute), time.Now().Add(4 * time.Minute)} {
		sp := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
			Payload:   testBody,
			Secret:    testSecret,
			Timestamp: ts, // zero: stripe uses time.Now()
		})
		if err := Verify(testSecret, sp.Header, sp.Payload, DefaultTolerance); err != nil {
			t.Errorf("Verify(stripe header %q): %v", sp.Header, err)
		}
		if err := Verify(testSecret, sp.Header, append(sp.Payload, ' '), DefaultTolerance); !errors.Is(err, ErrNoMatchingSignature) {
			t.Errorf("Verify(stripe header, tampered body) = %v, want ErrNoMatchingSignature", err)
		}
	}
	// Stripe's own v0 scheme is not ours: a header with only v0 has no v1.
	sp := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{
		Payload: testBody, Secret: testSecret, Scheme: "v0",
	})
	if err := Verify(testSecret, sp.Header, sp.Payload, DefaultTolerance); !errors.Is(err, ErrMalformedHeader) {
		t.Errorf("Verify(v0-only header %q) = %v, want ErrMalformedHeader", sp.Header, err)
	}
}

func TestVerifyRejectsTamperedBody(t *testing.T) {
	h := header(testSecret, testNow.Unix(), testBody)
	tampered := [][]byte{
		append(bytes.Clone(testBody), ' '),
		bytes.Replace(testBody, []byte("evt_01"), []byte("evt_02"), 1),
		testBody[:len(testBody)-1],
		nil,
	}
	for _, body := range tampered {
		if err := verifyAt(testSecret, h, body, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
			t.Errorf("body %q: err = %v, want ErrNoMatchingSignature", body, err)
		}
	}
	// A changed t invalidates the signature too.
	forged := strings.Replace(h, "t=1700000000", "t=1700000001", 1)
	if err := verifyAt(testSecret, forged, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
		t.Errorf("changed t: err = %v, want ErrNoMatchingSignature", err)
	}
}

func TestVerifyRejectsWrongSecret(t *testing.T) {
	h := header(testSecret, testNow.Unix(), testBody)
	for _, secret := range []string{"whsec_tesT", testSecret + " ", "other"} {
		if err := verifyAt(secret, h, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
			t.Errorf("secret %q: err = %v, want ErrNoMatchingSignature", secret, err)
		}
	}
}

func TestVerifyRejectsEmptySecret(t *testing.T) {
	h := header("", testNow.Unix(), testBody) // a valid signature with the empty key
	if err := verifyAt("", h, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrEmptySecret) {
		t.Errorf("err = %v, want ErrEmptySecret", err)
	}
}

func TestVerifyTimestampTolerance(t *testing.T) {
	now := testNow.Unix()
	tol := int64(DefaultTolerance / time.Second)
	tests := []struct {
		name      string
		sec       int64
		tolerance time.Duration
		ok        bool
	}{
		{"now", now, DefaultTolerance, true},
		{"exactly 5m old", now - tol, DefaultTolerance, true},
		{"exactly 5m ahead", now + tol, DefaultTolerance, true},
		{"5m1s old", now - tol - 1, DefaultTolerance, false},
		{"5m1s ahead", now + tol + 1, DefaultTolerance, false},
		{"a day old", now - 86400, DefaultTolerance, false},
		{"epoch", 0, DefaultTolerance, false},
		{"year 292277026596", 1<<63 - 1, DefaultTolerance, false},
		{"near maxTimestamp", maxTimestamp, DefaultTolerance, false},
		{"custom 10s, 10s old", now - 10, 10 * time.Second, true},
		{"custom 10s, 11s old", now - 11, 10 * time.Second, false},
		{"custom 10s, 11s ahead", now + 11, 10 * time.Second, false},
		{"custom 1h, 59m old", now - 59*60, time.Hour, true},
		{"zero tolerance means default: 5m old", now - tol, 0, true},
		{"zero tolerance means default: 5m1s old", now - tol - 1, 0, false},
		{"negative tolerance means default: 5m ahead", now + tol, -time.Second, true},
		{"negative tolerance means default: 5m1s ahead", now + tol + 1, -time.Second, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := header(testSecret, tc.sec, testBody)
			err := verifyAt(testSecret, h, testBody, tc.tolerance, testNow)
			switch {
			case tc.ok && err != nil:
				t.Errorf("err = %v, want nil", err)
			case !tc.ok && !errors.Is(err, ErrTimestampOutOfTolerance):
				t.Errorf("err = %v, want ErrTimestampOutOfTolerance", err)
			}
		})
	}
	// Sub-second clock: a header exactly 5m old at a whole second is
	// accepted, half a second later it is outside.
	h := header(testSecret, now-tol, testBody)
	if err := verifyAt(testSecret, h, testBody, DefaultTolerance, testNow.Add(500*time.Millisecond)); !errors.Is(err, ErrTimestampOutOfTolerance) {
		t.Errorf("5m0.5s old: err = %v, want ErrTimestampOutOfTolerance", err)
	}
}

func TestVerifyUsesWallClock(t *testing.T) {
	old := Sign(testSecret, time.Now().Add(-DefaultTolerance-time.Minute), testBody)
	if err := Verify(testSecret, old, testBody, DefaultTolerance); !errors.Is(err, ErrTimestampOutOfTolerance) {
		t.Errorf("Verify(6m old) = %v, want ErrTimestampOutOfTolerance", err)
	}
}

func TestVerifySeveralSignatures(t *testing.T) {
	good := header(testSecret, testNow.Unix(), testBody)
	_, goodSig, _ := strings.Cut(good, ",v1=")
	oldSig := hex.EncodeToString(bytes.Repeat([]byte{0xab}, sha256.Size))
	ts := "t=" + strconv.FormatInt(testNow.Unix(), 10)
	accepted := []string{
		ts + ",v1=" + oldSig + ",v1=" + goodSig,
		ts + ",v1=" + goodSig + ",v1=" + oldSig,
		"v1=" + oldSig + "," + ts + ",v1=" + goodSig, // order of pairs is free
		ts + ",v0=" + oldSig + ",v1=" + goodSig,      // unknown scheme ignored
		ts + ", v1=" + oldSig + ", v1=" + goodSig + ", v2=whatever",
		ts + ",v1=nothex,v1=" + goodSig,
		ts + ",v1=" + strings.ToUpper(goodSig), // hex case does not matter
		" " + ts + " ,\tv1=" + goodSig + " ",
	}
	for _, h := range accepted {
		if err := verifyAt(testSecret, h, testBody, DefaultTolerance, testNow); err != nil {
			t.Errorf("header %q: err = %v, want nil", h, err)
		}
	}
	rejected := []string{
		ts + ",v1=" + oldSig,
		ts + ",v1=" + oldSig + ",v1=" + oldSig,
		ts + ",v0=" + goodSig + ",v1=" + oldSig, // the right value under another scheme does not count
		ts + ",v1=" + goodSig[:len(goodSig)-2],  // truncated
		ts + ",v1=" + goodSig + "00",            // extended
	}
	for _, h := range rejected {
		if err := verifyAt(testSecret, h, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
			t.Errorf("header %q: err = %v, want ErrNoMatchingSignature", h, err)
		}
	}
}

func TestVerifyMalformedHeaders(t *testing.T) {
	good := header(testSecret, testNow.Unix(), testBody)
	_, sig, _ := strings.Cut(good, ",v1=")
	malformed := []string{
		"",
		" ",
		"t=",
		"t=,v1=" + sig,
		"v1=abc",
		"v1=" + sig, // missing t
		"v1=" + sig + ",v1=" + sig,
		"t=abc,v1=" + sig,
		"t=1700000000", // no v1
		"t=1700000000,v0=" + sig,
		"t=-1700000000,v1=" + sig,
		"t=+1700000000,v1=" + sig,
		"t=1700000000.5,v1=" + sig,
		"t=1e9,v1=" + sig,
		"t=0x1,v1=" + sig,
		"t=1700000000,t=1700000000,v1=" + sig, // repeated t
		"t=99999999999999999999,v1=" + sig,    // out of int64
		"t=1700000000,v1=" + sig + ",",        // empty pair
		"t=1700000000,,v1=" + sig,
		"t=1700000000,=x,v1=" + sig,
		"t=1700000000,garbage,v1=" + sig,
		"t 1700000000,v1=" + sig,
		"t=1700000000;v1=" + sig,
		"garbage",
		"\x00\xff",
		"Bearer abc",
		good[:len("t=17")],
	}
	for _, h := range malformed {
		if err := verifyAt(testSecret, h, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrMalformedHeader) {
			t.Errorf("header %q: err = %v, want ErrMalformedHeader", h, err)
		}
	}
}

func TestVerifyNonHexSignature(t *testing.T) {
	ts := "t=" + strconv.FormatInt(testNow.Unix(), 10)
	for _, v := range []string{"", "abc", "zz", "0", "g" + strings.Repeat("0", 63), "é", strings.Repeat("f", 1<<16), "==", "v1=x"} {
		h := ts + ",v1=" + v
		if err := verifyAt(testSecret, h, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
			t.Errorf("v1=%.20q: err = %v, want ErrNoMatchingSignature", v, err)
		}
	}
}

func TestVerifyRequest(t *testing.T) {
	newReq := func(body []byte, sig string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/hooks/tally", bytes.NewReader(body))
		if sig != "" {
			r.Header.Set(SignatureHeader, sig)
		}
		return r
	}
	t.Run("valid", func(t *testing.T) {
		got, err := VerifyRequest(testSecret, newReq(testBody, Sign(testSecret, time.Now(), testBody)), DefaultTolerance)
		if err != nil || !bytes.Equal(got, testBody) {
			t.Fatalf("VerifyRequest = %q, %v; want body, nil", got, err)
		}
	})
	t.Run("tampered", func(t *testing.T) {
		got, err := VerifyRequest(testSecret, newReq([]byte(`{"id":"evt_02"}`), Sign(testSecret, time.Now(), testBody)), DefaultTolerance)
		if !errors.Is(err, ErrNoMatchingSignature) || got != nil {
			t.Fatalf("VerifyRequest = %q, %v; want nil, ErrNoMatchingSignature", got, err)
		}
	})
	t.Run("no header", func(t *testing.T) {
		if _, err := VerifyRequest(testSecret, newReq(testBody, ""), DefaultTolerance); !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("err = %v, want ErrMalformedHeader", err)
		}
	})
	t.Run("nil body", func(t *testing.T) {
		r := newReq(nil, Sign(testSecret, time.Now(), nil))
		r.Body = nil
		got, err := VerifyRequest(testSecret, r, DefaultTolerance)
		if err != nil || len(got) != 0 {
			t.Fatalf("VerifyRequest = %q, %v; want empty, nil", got, err)
		}
	})
	t.Run("exactly MaxBodyBytes", func(t *testing.T) {
		body := bytes.Repeat([]byte("a"), MaxBodyBytes)
		got, err := VerifyRequest(testSecret, newReq(body, Sign(testSecret, time.Now(), body)), DefaultTolerance)
		if err != nil || len(got) != MaxBodyBytes {
			t.Fatalf("VerifyRequest: len %d, %v; want %d, nil", len(got), err, MaxBodyBytes)
		}
	})
	t.Run("too large", func(t *testing.T) {
		body := bytes.Repeat([]byte("a"), MaxBodyBytes+1)
		_, err := VerifyRequest(testSecret, newReq(body, Sign(testSecret, time.Now(), body)), DefaultTolerance)
		var mbe *http.MaxBytesError
		if !errors.As(err, &mbe) {
			t.Fatalf("err = %v, want *http.MaxBytesError", err)
		}
	})
}

// TestConstantTimeComparison reads webhook.go: the signature check must go
// through hmac.Equal, and nothing may compare signatures another way.
func TestConstantTimeComparison(t *testing.T) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "webhook.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string]bool{
		"bytes.Equal": true, "bytes.Compare": true, "bytes.EqualFold": true,
		"strings.Compare": true, "strings.EqualFold": true, "reflect.DeepEqual": true,
	}
	var verify *ast.FuncDecl
	for _, d := range file.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && fd.Name.Name == "verifyAt" {
			verify = fd
		}
	}
	if verify == nil {
		t.Fatal("verifyAt not found in webhook.go")
	}
	ast.Inspect(file, func(n ast.Node) bool {
		if call, ok := n.(*ast.CallExpr); ok {
			if name := selectorName(call.Fun); forbidden[name] {
				t.Errorf("%s: %s used; compare signatures with hmac.Equal", fset.Position(call.Pos()), name)
			}
		}
		return true
	})
	hmacEqual := 0
	ast.Inspect(verify.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if selectorName(n.Fun) == "hmac.Equal" {
				hmacEqual++
				if len(n.Args) != 2 || !mentions(n.Args[0], "expected") {
					t.Errorf("%s: hmac.Equal does not compare the expected MAC", fset.Position(n.Pos()))
				}
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (mentions(n.X, "expected") || mentions(n.Y, "expected") || mentions(n.X, "got") || mentions(n.Y, "got")) {
				t.Errorf("%s: signature compared with %s", fset.Position(n.Pos()), n.Op)
			}
		}
		return true
	})
	if hmacEqual != 1 {
		t.Errorf("verifyAt calls hmac.Equal %d times, want 1 (inside the loop over every v1)", hmacEqual)
	}
	// The loop must not stop at the first match: every v1 is compared.
	ast.Inspect(verify.Body, func(n ast.Node) bool {
		if r, ok := n.(*ast.RangeStmt); ok && mentions(r.X, "sigs") {
			ast.Inspect(r.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ReturnStmt:
					t.Errorf("%s: return inside the loop over v1 values", fset.Position(n.Pos()))
				case *ast.BranchStmt:
					if n.Tok == token.BREAK {
						t.Errorf("%s: break inside the loop over v1 values", fset.Position(n.Pos()))
					}
				}
				return true
			})
		}
		return true
	})
}

func selectorName(e ast.Expr) string {
	sel, ok := e.(*ast.SelectorExpr)
	if !ok {
		return ""
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return ""
	}
	return x.Name + "." + sel.Sel.Name
}

func mentions(e ast.Expr, name string) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok && id.Name == name {
			found = true
		}
		return !found
	})
	return found
}

// oracleAccepts is an independent statement of the rule: some "t=" field
// is within tolerance and some "v1=" field, hex-decoded, is the HMAC-SHA256
// of "<t>.<body>" with secret.
func oracleAccepts(secret, header string, body []byte, now time.Time) bool {
	if secret == "" {
		return false
	}
	var ts []string
	var sigs [][]byte
	for _, f := range strings.Split(header, ",") {
		f = strings.TrimSpace(f)
		if v, ok := strings.CutPrefix(f, "t="); ok {
			ts = append(ts, v)
		}
		if v, ok := strings.CutPrefix(f, "v1="); ok {
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	if len(ts) != 1 {
		return false
	}
	sec, err := strconv.ParseUint(ts[0], 10, 63)
	if err != nil {
		return false
	}
	if d := now.Unix() - int64(sec); d > 300 || d < -300 {
		return false
	}
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts[0] + "."))
	m.Write(body)
	want := m.Sum(nil)
	for _, s := range sigs {
		if bytes.Equal(s, want) {
			return true
		}
	}
	return false
}

func isSentinel(err error) bool {
	for _, known := range []error{ErrMalformedHeader, ErrTimestampOutOfTolerance, ErrNoMatchingSignature, ErrEmptySecret} {
		if errors.Is(err, known) {
			return true
		}
	}
	return false
}

func FuzzVerify(f *testing.F) {
	good := header(testSecret, testNow.Unix(), testBody)
	f.Add(testSecret, good, testBody)
	f.Add(testSecret, good, []byte("other"))
	f.Add("other", good, testBody)
	f.Add(testSecret, "t=1700000000,v1=abc,v0=def, v1="+good[len("t=1700000000,v1="):], testBody)
	f.Add(testSecret, "", []byte(nil))
	f.Add(testSecret, "t=,v1=", []byte(nil))
	f.Add(testSecret, "t=99999999999999999999,v1=00", []byte("x"))
	f.Add(testSecret, "t=9223372036854775807,v1=00", []byte("x"))
	f.Add("", header("", testNow.Unix(), nil), []byte(nil))
	f.Fuzz(func(t *testing.T, secret, h string, body []byte) {
		err := verifyAt(secret, h, body, DefaultTolerance, testNow)
		if err != nil && !isSentinel(err) {
			t.Fatalf("verifyAt(%q, %q, %q) = %v: not a sentinel error", secret, h, body, err)
		}
		// Accepted only what the oracle accepts; and when the oracle would
		// accept, the only reason to refuse is a stricter header syntax
		// (stray or empty pairs, a repeated t).
		oracle := oracleAccepts(secret, h, body, testNow)
		if err == nil && !oracle {
			t.Fatalf("verifyAt(%q, %q, %q) accepted, oracle refuses", secret, h, body)
		}
		if err != nil && oracle && !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("verifyAt(%q, %q, %q) = %v, oracle accepts", secret, h, body, err)
		}
		if secret == "" {
			return
		}
		// Whatever the inputs, Sign's output verifies, and only for this
		// secret and body.
		signed := Sign(secret, testNow, body)
		if err := verifyAt(secret, signed, body, DefaultTolerance, testNow); err != nil {
			t.Fatalf("round trip secret=%q body=%q: %v", secret, body, err)
		}
		if err := verifyAt(secret+"x", signed, body, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
			t.Fatalf("other secret accepted: %v", err)
		}
		if err := verifyAt(secret, signed, append(bytes.Clone(body), 'x'), DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
			t.Fatalf("other body accepted: %v", err)
		}
	})
}

// During a secret rotation Tally signs with both secrets: one header, two
// v1 values; a receiver holding either secret accepts it, one holding
// neither does not.
func TestSignEachVerifiesWithEitherSecret(t *testing.T) {
	h := SignEach([]string{"new-secret-0123456789", testSecret}, testNow, testBody)
	if strings.Count(h, ",v1=") != 2 || !strings.HasPrefix(h, "t=") {
		t.Fatalf("header %q, want t and two v1 values", h)
	}
	for _, s := range []string{"new-secret-0123456789", testSecret} {
		if err := verifyAt(s, h, testBody, DefaultTolerance, testNow); err != nil {
			t.Errorf("secret %q: %v", s, err)
		}
	}
	if err := verifyAt("some-other-secret-012", h, testBody, DefaultTolerance, testNow); !errors.Is(err, ErrNoMatchingSignature) {
		t.Errorf("a third secret: %v", err)
	}
	if Sign(testSecret, testNow, testBody) != SignEach([]string{testSecret}, testNow, testBody) {
		t.Error("Sign and SignEach with one secret differ")
	}
}
