package httpapi_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/reporoot"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/webhook"
)

// standardRequest is one Standard Webhooks delivery as its receiver got it.
type standardRequest struct {
	id, timestamp, signature string
	tallySignature           string
	body                     []byte
}

func (r *getReceiver) standard(t *testing.T, i int) standardRequest {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if i >= len(r.got) {
		t.Fatalf("receiver got %d requests, want at least %d", len(r.got), i+1)
	}
	h := r.got[i].Header
	return standardRequest{id: h.Get("webhook-id"), timestamp: h.Get("webhook-timestamp"), signature: h.Get("webhook-signature"),
		tallySignature: h.Get(webhook.SignatureHeader), body: r.bodies[i]}
}

// nodeVerify checks deliveries with the npm verifiers standardwebhooks and
// svix (scripts/verifiers.sh), run by node: for each (secret, request) it
// returns what each said, "ok" or its error.
func nodeVerify(t *testing.T, secrets []string, reqs []standardRequest) []map[string]string {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	modules := filepath.Join(root, ".cache", "verifiers", "node_modules")
	if _, err := os.Stat(filepath.Join(modules, "svix")); err != nil {
		reporoot.Missing(t, "no npm verifiers: run `./scripts/verifiers.sh fetch` first")
	}
	type input struct {
		Secret  string            `json:"secret"`
		Headers map[string]string `json:"headers"`
		Body    string            `json:"body"`
	}
	var in []input
	for i, r := range reqs {
		in = append(in, input{Secret: secrets[i], Body: string(r.body),
			Headers: map[string]string{"webhook-id": r.id, "webhook-timestamp": r.timestamp, "webhook-signature": r.signature}})
	}
	cmd := exec.Command("node", filepath.Join("testdata", "verify-standard.mjs"), modules)
	cmd.Stdin = bytes.NewReader(must(json.Marshal(in)))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node verify-standard.mjs: %v\n%s", err, stderr.String())
	}
	var got []map[string]string
	if err := json.Unmarshal(out, &got); err != nil || len(got) != len(reqs) {
		t.Fatalf("node verify-standard.mjs answered %s (%v)", out, err)
	}
	return got
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// ed25519Verifies says whether one v1a signature of r is the Ed25519
// signature of "<id>.<timestamp>.<body>" by publicKey (whpk_…), checked
// with crypto/ed25519 alone.
func ed25519Verifies(t *testing.T, publicKey string, r standardRequest) bool {
	t.Helper()
	pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(publicKey, "whpk_"))
	if err != nil || len(pub) != ed25519.PublicKeySize || !strings.HasPrefix(publicKey, "whpk_") {
		t.Fatalf("publicKey %q is not whpk_ + base64 of 32 bytes", publicKey)
	}
	msg := []byte(r.id + "." + r.timestamp + "." + string(r.body))
	for _, s := range strings.Fields(r.signature) {
		if v, sig, _ := strings.Cut(s, ","); v == "v1a" {
			if b, err := base64.StdEncoding.DecodeString(sig); err == nil && ed25519.Verify(pub, msg, b) {
				return true
			}
		}
	}
	return false
}

// hmacVerifies says whether one v1 signature of r is the HMAC-SHA256 of
// "<id>.<timestamp>.<body>" keyed with the bytes of the whsec_ secret.
func hmacVerifies(secret string, r standardRequest) bool {
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	m := hmac.New(sha256.New, key)
	m.Write([]byte(r.id + "." + r.timestamp + "." + string(r.body)))
	want := "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, s := range strings.Fields(r.signature) {
		if s == want {
			return true
		}
	}
	return false
}

func newWhsec() string {
	b := make([]byte, 32)
	rand.Read(b)
	return "whsec_" + base64.StdEncoding.EncodeToString(b)
}

// Subscriptions of the standard-webhooks scheme are signed as the Standard
// Webhooks specification says: the HMAC ones verify with the official npm
// library and Svix's, the Ed25519 ones with crypto/ed25519 and the public
// key the subscription shows; while a key is rotated both sign, for 24 h.
func TestStandardWebhooksVerifyWithTheirLibraries(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		// The npm verifiers check the timestamp against the real clock.
		e := newPipelineEnvAt(t, st, time.Now(), nil)
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		hmacRcv := newGetReceiver(t, func(int) int { return 204 })
		edRcv := newGetReceiver(t, func(int) int { return 204 })

		created := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{
			"url": hmacRcv.srv.URL, "events": []string{"conversion.created"}, "signatureScheme": "standard-webhooks"}))
		var hmacSub tally.Subscription
		created.decode(t, &hmacSub)
		if hmacSub.SignatureScheme != "standard-webhooks" || hmacSub.SignatureAlgorithm != "hmac-sha256" || !strings.HasPrefix(hmacSub.Secret, "whsec_") ||
			created.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("created %s (Cache-Control %q), want hmac-sha256 with a whsec_ secret shown once, not stored by caches", created.body, created.header.Get("Cache-Control"))
		}
		if r := e.must(200, e.call("GET", "/api/public/webhooks/"+hmacSub.ID, key, nil)); strings.Contains(string(r.body), hmacSub.Secret) {
			t.Errorf("GET shows the secret: %s", r.body)
		}
		var edSub tally.Subscription
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": edRcv.srv.URL, "events": []string{"conversion.created"},
			"signatureScheme": "standard-webhooks", "signatureAlgorithm": "ed25519"})).decode(t, &edSub)
		if edSub.SignatureAlgorithm != "ed25519" || !strings.HasPrefix(edSub.PublicKey, "whpk_") || edSub.Secret != "" {
			t.Fatalf("ed25519 subscription %+v, want a whpk_ publicKey and no secret", edSub)
		}

		convert := func(txn string, n int) {
			t.Helper()
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": txn}))
			e.waitFor(key, "status=succeeded", txn+" delivered", func(ds []tally.Delivery) bool { return len(ds) == 2*n })
		}
		convert("t-1", 1)
		h, ed := hmacRcv.standard(t, 0), edRcv.standard(t, 0)
		if !strings.HasPrefix(h.id, "wh_") || h.tallySignature != "" || len(strings.Fields(h.signature)) != 1 {
			t.Errorf("hmac delivery: webhook-id %q, X-Tally-Signature %q, webhook-signature %q; want a wh_ id and one signature of the standard only", h.id, h.tallySignature, h.signature)
		}
		other := newWhsec()
		got := nodeVerify(t, []string{hmacSub.Secret, other}, []standardRequest{h, h})
		if got[0]["standardwebhooks"] != "ok" || got[0]["svix"] != "ok" {
			t.Errorf("npm verifiers on a delivery signed with its secret: %v", got[0])
		}
		if got[1]["standardwebhooks"] == "ok" || got[1]["svix"] == "ok" {
			t.Errorf("npm verifiers accept another secret: %v", got[1])
		}
		if !ed25519Verifies(t, edSub.PublicKey, ed) || !strings.HasPrefix(ed.signature, "v1a,") {
			t.Errorf("ed25519 delivery %q does not verify with publicKey %s", ed.signature, edSub.PublicKey)
		}
		for _, c := range []struct {
			key string
			r   standardRequest
		}{{hmacSub.Secret, h}, {edSub.PublicKey, ed}} {
			if err := webhook.VerifyStandard(c.key, c.r.id, c.r.timestamp, c.r.signature, c.r.body, 0); err != nil {
				t.Errorf("webhook.VerifyStandard(%s…): %v", c.key[:5], err)
			}
		}

		// Rotation: a new secret by PATCH, a new Ed25519 key by rotate; the
		// keys they replace sign too.
		newSecret := newWhsec()
		e.must(200, e.call("PATCH", "/api/public/webhooks/"+hmacSub.ID, key, map[string]any{"secret": newSecret}))
		var rotated tally.Subscription
		e.must(200, e.call("POST", "/api/public/webhooks/"+edSub.ID+"/rotate", key, nil)).decode(t, &rotated)
		if rotated.PublicKey == edSub.PublicKey || !strings.HasPrefix(rotated.PublicKey, "whpk_") || rotated.PreviousSecretExpiresAt == nil {
			t.Fatalf("rotated %+v, want a new publicKey and previousSecretExpiresAt", rotated)
		}
		convert("t-2", 2)
		h, ed = hmacRcv.standard(t, 1), edRcv.standard(t, 1)
		got = nodeVerify(t, []string{hmacSub.Secret, newSecret}, []standardRequest{h, h})
		for i, g := range got {
			if g["standardwebhooks"] != "ok" || g["svix"] != "ok" {
				t.Errorf("npm verifiers during rotation, secret %d of 2: %v (signatures %q)", i+1, g, h.signature)
			}
		}
		if !ed25519Verifies(t, edSub.PublicKey, ed) || !ed25519Verifies(t, rotated.PublicKey, ed) {
			t.Errorf("during rotation %q verifies not with both public keys", ed.signature)
		}

		e.advance(24*time.Hour + time.Second)
		convert("t-3", 3)
		h, ed = hmacRcv.standard(t, 2), edRcv.standard(t, 2)
		if len(strings.Fields(h.signature)) != 1 || !hmacVerifies(newSecret, h) || len(strings.Fields(ed.signature)) != 1 || !ed25519Verifies(t, rotated.PublicKey, ed) {
			t.Errorf("24 h after rotation: %q and %q, want one signature each, by the new keys", h.signature, ed.signature)
		}
	})
}

// A scheme, algorithm or secret that does not fit is refused with a 422
// naming the field, and changes nothing; webhook.test cannot be subscribed
// to (its button sends it).
func TestSignatureSchemesRefuseWhatDoesNotFit(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithLoopbackReceivers())
		_, key := e.brand()
		base := func(extra map[string]any) map[string]any {
			body := map[string]any{"url": "https://hooks.example.com/x", "events": []string{"conversion.created"}}
			for k, v := range extra {
				body[k] = v
			}
			return body
		}
		std := "standard-webhooks"
		short := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 23))
		long := "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))
		for _, c := range []struct {
			body  map[string]any
			field string
		}{
			{base(map[string]any{"signatureScheme": "svix"}), "signatureScheme"},
			{base(map[string]any{"signatureScheme": std, "signatureAlgorithm": "rsa"}), "signatureAlgorithm"},
			{base(map[string]any{"signatureAlgorithm": "ed25519"}), "signatureAlgorithm"},
			{base(map[string]any{"signatureScheme": std, "secret": short}), "secret"},
			{base(map[string]any{"signatureScheme": std, "secret": long}), "secret"},
			{base(map[string]any{"signatureScheme": std, "secret": "whsec_not base64!!!!!!!!!!!!!!!!!!"}), "secret"},
			{base(map[string]any{"signatureScheme": std, "secret": "0123456789abcdef0123456789abcdef"}), "secret"},
			{base(map[string]any{"signatureScheme": std, "signatureAlgorithm": "ed25519", "secret": newWhsec()}), "secret"},
			{base(map[string]any{"events": []string{"conversion.created", "webhook.test"}}), "webhook.test"},
		} {
			r := e.call("POST", "/api/public/webhooks", key, c.body)
			if r.status != 422 || !strings.Contains(string(r.body), c.field) {
				t.Errorf("%v: %d %s, want 422 naming %s", c.body, r.status, r.body, c.field)
			}
		}
		if got := e.listAll("/api/public/webhooks", key); len(got) != 0 {
			t.Fatalf("%d subscriptions after refused requests", len(got))
		}

		id := e.must(201, e.call("POST", "/api/public/webhooks", key, base(map[string]any{"signatureScheme": std, "signatureAlgorithm": "ed25519"}))).field(t, "id")
		tallyID := e.must(201, e.call("POST", "/api/public/webhooks", key, base(map[string]any{"secret": "0123456789abcdef"}))).field(t, "id")
		before := e.must(200, e.call("GET", "/api/public/webhooks/"+id, key, nil)).body
		for _, c := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{"signatureScheme": "tally"}, "signatureScheme"},
			{map[string]any{"signatureAlgorithm": "hmac-sha256"}, "signatureAlgorithm"},
			{map[string]any{"secret": newWhsec()}, "secret"},
			{map[string]any{"events": []string{"webhook.test"}}, "webhook.test"},
		} {
			r := e.call("PATCH", "/api/public/webhooks/"+id, key, c.body)
			if r.status != 422 || !strings.Contains(string(r.body), c.field) {
				t.Errorf("PATCH %v: %d %s, want 422 naming %s", c.body, r.status, r.body, c.field)
			}
		}
		if after := e.must(200, e.call("GET", "/api/public/webhooks/"+id, key, nil)).body; !bytes.Equal(before, after) {
			t.Errorf("refused PATCHes changed the subscription:\n%s\n%s", before, after)
		}
		if r := e.call("POST", "/api/public/webhooks/"+tallyID+"/rotate", key, nil); r.status != 409 {
			t.Errorf("rotate of a tally-scheme subscription: %d %s, want 409 (PATCH a new secret)", r.status, r.body)
		}
		var sub tally.Subscription
		e.must(200, e.call("GET", "/api/public/webhooks/"+tallyID, key, nil)).decode(t, &sub)
		if sub.SignatureScheme != "tally" {
			t.Errorf("default scheme %q, want tally", sub.SignatureScheme)
		}
	})
}
