package httpapi_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

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
