package webhook_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/outgoing"
)

// TestReadmeSaysWhichHeadersNeedASecret reads the header table of
// README.md (header, when it is sent, value) and checks it against what the
// real sender sends with a secret and without one.
func TestReadmeSaysWhichHeadersNeedASecret(t *testing.T) {
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sent := map[string]string{} // header -> its "Sent" cell
	inTable := false
	for sc := bufio.NewScanner(f); sc.Scan(); {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "| Header | Sent |"):
			inTable = true
		case inTable && strings.HasPrefix(line, "| `"):
			cells := strings.Split(line, "|")
			sent[strings.Trim(strings.TrimSpace(cells[1]), "`")] = strings.TrimSpace(cells[2])
		case inTable && !strings.HasPrefix(line, "|"):
			inTable = false
		}
	}
	if len(sent) != 3 {
		t.Fatalf("README.md's header table (| Header | Sent | Value |) lists %v, want the three headers", sent)
	}

	got := make(chan http.Header, 2)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- r.Header.Clone() }))
	defer rcv.Close()
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true})
	for _, secret := range []string{"whsec_0123456789abcdef", ""} {
		req := outgoing.Request{URL: rcv.URL, WebhookID: "wh_01jd0000000000000000000000", Event: "webhook.test", Body: []byte(`{}`)}
		if secret != "" {
			req.Secrets = []string{secret}
		}
		sender.Send(t.Context(), req)
		h := <-got
		for name, when := range sent {
			want := when == "always" || secret != "" && strings.Contains(when, "secret")
			if has := h.Get(name) != ""; has != want {
				t.Errorf("with secret %q: %s present = %v, but README.md says it is sent %q", secret, name, has, when)
			}
		}
	}
}
