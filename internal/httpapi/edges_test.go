package httpapi_test

import (
	"bufio"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// rawExchange sends request as written over a connection of its own and
// reads the answer: for requests http.Client will not send as written.
func (e *env) rawExchange(request string) response {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.srv.Listener.Addr().String())
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(conn, request); err != nil {
		e.t.Fatal(err)
	}
	req, _ := http.NewRequest(strings.Fields(request)[0], "/", nil)
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: body}
}

// TestConnectIsRefusedInTheErrorShape: Tally is no proxy. CONNECT to an
// authority (host:port) names nothing on this server and answers 405 with
// Allow, in the error shape and counted like any request without a key;
// CONNECT to one of the API's paths answers as any other method that path
// does not serve.
func TestConnectIsRefusedInTheErrorShape(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{})
		host := e.srv.Listener.Addr().String()
		for _, c := range []struct{ target, allow string }{
			{"example.com:443", "GET, POST, PATCH, PUT, DELETE"},
			{host, "GET, POST, PATCH, PUT, DELETE"},
			{"/api/public/webhook-events", "GET"},
		} {
			r := e.rawExchange(fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", c.target, host))
			if r.status != 405 || r.errorCode() != "method_not_allowed" || r.header.Get("Content-Type") != "application/json" {
				t.Errorf("CONNECT %s: %d %s %q, want 405 method_not_allowed in the error shape", c.target, r.status, r.header.Get("Content-Type"), r.body)
			}
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("CONNECT %s: Allow %q, want %q", c.target, got, c.allow)
			}
			if !hasRateHeaders(r) {
				t.Errorf("CONNECT %s: no X-RateLimit-* headers: %v", c.target, r.header)
			}
		}
	})
}

// TestAnswersWithSecretsAreNotStored: every answer that carries a secret
// shown once (an API key, a postback token) says Cache-Control: no-store,
// so that no cache along the way keeps it; the answers that list or
// describe those credentials without their secrets may be cached.
func TestAnswersWithSecretsAreNotStored(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		const admin = "admin-token"
		e := newEnv(t, st, httpapi.Config{})
		adminSrv := httptest.NewServer(httpapi.New(e.svc.API(), httpapi.Config{AdminToken: admin, Logger: slog.New(slog.DiscardHandler)}).Handler(httpapi.AllGroups...))
		t.Cleanup(adminSrv.Close)
		brandID, key := e.brand()

		secrets := []struct {
			name   string
			r      response
			status int
			field  string // the secret in the answer
		}{
			{"POST /api/v1/keys", e.call("POST", "/api/v1/keys", key, map[string]any{"name": "CI"}), 201, "key"},
			{"POST /api/v1/postback-token", e.call("POST", "/api/v1/postback-token", key, nil), 201, "token"},
			{"POST /_admin/keys", adminCall(t, adminSrv, "POST", "/_admin/keys", admin, fmt.Sprintf(`{"brandId":%q}`, brandID)), 201, "key"},
		}
		for _, c := range secrets {
			if c.r.status != c.status || c.r.field(t, c.field) == "" {
				t.Fatalf("%s: %d %s, want %d with %s", c.name, c.r.status, c.r.body, c.status, c.field)
			}
			if got := c.r.header.Get("Cache-Control"); got != "no-store" {
				t.Errorf("%s answers the secret with Cache-Control %q, want no-store", c.name, got)
			}
		}
	})
}

// adminCall sends a request to the admin API with its token.
func adminCall(t *testing.T, srv *httptest.Server, method, path, token, body string) response {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: raw}
}
