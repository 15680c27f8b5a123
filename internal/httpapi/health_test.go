package httpapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// TestHealthAndReadiness: /healthz answers while the process runs and
// /readyz while the store answers a read, both without a key and never
// cached; when the store fails, /readyz answers 503 in the error shape.
func TestHealthAndReadiness(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{})
		for _, path := range []string{"/healthz", "/readyz"} {
			r := e.must(200, e.call("GET", path, "", nil))
			if r.field(t, "status") != "ok" || r.header.Get("Content-Type") != "application/json" || r.header.Get("Cache-Control") != "no-store" {
				t.Errorf("GET %s: %s %v, want {\"status\":\"ok\"}, no-store", path, r.body, r.header)
			}
			if r := e.call("HEAD", path, "", nil); r.status != 200 {
				t.Errorf("HEAD %s: %d", path, r.status)
			}
			if r := e.call("POST", path, "", nil); r.status != 405 || r.header.Get("Allow") != "GET" || r.errorCode() != "method_not_allowed" {
				t.Errorf("POST %s: %d %v %s, want 405 with Allow: GET", path, r.status, r.header, r.body)
			}
		}

		svc := e.svc.API()
		svc.Store = failingStore{}
		srv := httptest.NewServer(httpapi.New(svc, httpapi.Config{Logger: slog.New(slog.DiscardHandler)}).Handler())
		t.Cleanup(srv.Close)
		down := &env{t: t, svc: e.svc, srv: srv}
		if r := down.call("GET", "/readyz", "", nil); r.status != 503 || r.errorCode() != "unavailable" || r.header.Get("Cache-Control") != "no-store" {
			t.Errorf("GET /readyz with the store down: %d %s, want 503 unavailable", r.status, r.body)
		}
		down.must(200, down.call("GET", "/healthz", "", nil))
	})
}

// failingStore is a store that does not answer.
type failingStore struct{}

func (failingStore) Get(context.Context, store.Key) (store.Item, error) {
	return store.Item{}, errors.New("dial tcp 127.0.0.1:8000: connection refused")
}
