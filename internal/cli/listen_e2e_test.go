package cli_test

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/webhook"
)

// listener is a running `tally listen`.
type listener struct {
	addr           string
	stdout, stderr *testenv.SyncBuffer
}

func startListen(t *testing.T, args ...string) *listener {
	t.Helper()
	l := &listener{stdout: &testenv.SyncBuffer{}, stderr: &testenv.SyncBuffer{}}
	port := freePort(t)
	l.addr = fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(tallyBin, append([]string{"listen", "--port", fmt.Sprint(port)}, args...)...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env(), l.stdout, l.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(l.stderr.String(), "listening for webhooks on http://"+l.addr) {
		select {
		case <-done:
			t.Fatalf("tally listen exited: %s", l.stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tally listen did not start: %s", l.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return l
}

// lines returns what listen printed on stdout, one delivery a line.
func (l *listener) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(l.stdout.String()))
	for sc.Scan() {
		var v map[string]any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("listen printed a line that is not JSON: %q", sc.Text())
		}
		out = append(out, v)
	}
	return out
}

// TestListenReceivesDeliveries is the README's webhook walk-through: a
// local server delivers to `tally listen`, which verifies the signature
// and prints the delivery; a forged one is refused and not printed.
func TestListenReceivesDeliveries(t *testing.T) {
	t.Parallel()
	const secret = "whsec_at_least_16_chars"
	environ := env("TALLY_RATE_LIMIT=1000000")
	data := t.TempDir()
	s := serve(t, environ, "--data", data)
	l := startListen(t, "--secret", secret)
	brandID, _, key := setupBrand(t, environ, data, "Acme")

	s.call(t, "POST", "/api/public/webhooks", key, map[string]any{
		"url": "http://" + l.addr + "/hooks", "events": []string{"partner.applied"}, "secret": secret,
	}).expect(t, "subscribe the listener", 201)
	partner := s.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "", map[string]any{"name": "Pat", "email": "pat@example.com"}).
		expect(t, "apply", 201).object(t)

	deadline := time.Now().Add(30 * time.Second)
	for len(l.lines(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("listen printed nothing; its stderr:\n%s\nserver:\n%s", l.stderr, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got := l.lines(t)[0]
	body, _ := got["body"].(map[string]any)
	data1, _ := body["data"].(map[string]any)
	if got["event"] != "partner.applied" || got["signature"] != "verified" || !strings.HasPrefix(fmt.Sprint(got["webhookId"]), "wh_") ||
		body["event"] != "partner.applied" || data1["partnerId"] != partner["id"] {
		t.Errorf("listen printed %v", got)
	}
	// The delivery succeeded: listen answered 204.
	for {
		ds := s.listDeliveries(t, key, nil)
		if len(ds) == 1 && ds[0].Status == "succeeded" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deliveries %+v, want one succeeded", ds)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// A delivery signed with another secret is refused and not printed.
	forged := `{"id":"evt_01jd0000000000000000000000","event":"partner.applied","createdAt":"2026-01-01T00:00:00.000Z","brandId":"brd_x","data":{}}`
	req, _ := http.NewRequest("POST", "http://"+l.addr+"/hooks", strings.NewReader(forged))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign("whsec_not_the_right_one", time.Now(), []byte(forged)))
	req.Header.Set(webhook.EventHeader, "partner.applied")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// listen's output reaches this process through a pipe: wait for it.
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(l.stderr.String(), "refused") && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	if resp.StatusCode != 400 || len(l.lines(t)) != 1 || !strings.Contains(l.stderr.String(), "refused") {
		t.Errorf("forged delivery: %d, %d lines printed, stderr %q; want 400, still 1 line, and a refusal", resp.StatusCode, len(l.lines(t)), l.stderr)
	}
}

// TestListenVerifiesStandardWebhooks: `tally listen --scheme
// standard-webhooks` verifies an Ed25519 subscription's deliveries with its
// public key, and refuses one signed by another key.
func TestListenVerifiesStandardWebhooks(t *testing.T) {
	t.Parallel()
	environ := env("TALLY_RATE_LIMIT=1000000")
	data := t.TempDir()
	s := serve(t, environ, "--data", data)
	brandID, _, key := setupBrand(t, environ, data, "Acme")
	sub := s.call(t, "POST", "/api/public/webhooks", key, map[string]any{"url": "http://127.0.0.1:9/later", "events": []string{"partner.applied"},
		"signatureScheme": "standard-webhooks", "signatureAlgorithm": "ed25519"}).expect(t, "subscribe", 201).object(t)
	publicKey := fmt.Sprint(sub["publicKey"])
	l := startListen(t, "--scheme", "standard-webhooks", "--secret", publicKey)
	s.call(t, "PATCH", "/api/public/webhooks/"+fmt.Sprint(sub["id"]), key, map[string]any{"url": "http://" + l.addr + "/hooks"}).expect(t, "point it at listen", 200)
	s.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "", map[string]any{"name": "Pat", "email": "pat@example.com"}).expect(t, "apply", 201)

	deadline := time.Now().Add(30 * time.Second)
	for len(l.lines(t)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("listen printed nothing; its stderr:\n%s\nserver:\n%s", l.stderr, s.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := l.lines(t)[0]; got["event"] != "partner.applied" || got["signature"] != "verified" {
		t.Errorf("listen printed %v", got)
	}

	other, err := webhook.PublicKey("whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if err != nil || other == publicKey {
		t.Fatal(err)
	}
	body := []byte(`{"id":"evt_01jd0000000000000000000000","event":"partner.applied"}`)
	sig, err := webhook.SignStandard([]string{"whsk_" + base64.StdEncoding.EncodeToString(make([]byte, 32))}, "wh_forged", time.Now(), body)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", "http://"+l.addr+"/hooks", bytes.NewReader(body))
	req.Header.Set("webhook-id", "wh_forged")
	req.Header.Set("webhook-timestamp", fmt.Sprint(time.Now().Unix()))
	req.Header.Set("webhook-signature", sig)
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 400 || len(l.lines(t)) != 1 {
		t.Errorf("delivery signed by another key: %d, %d lines printed; want 400 and still 1", resp.StatusCode, len(l.lines(t)))
	}
}
