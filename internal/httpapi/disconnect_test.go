package httpapi_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// faultyStore fails writes as fail says while it is set: a store stuck
// behind a slow disk, or one whose items other writers keep changing.
type faultyStore struct {
	store.Store
	fail atomic.Pointer[func(context.Context) error]
}

func (s *faultyStore) Transact(ctx context.Context, ops ...store.Op) error {
	if f := s.fail.Load(); f != nil {
		return (*f)(ctx)
	}
	return s.Store.Transact(ctx, ops...)
}

func (s *faultyStore) failWith(f func(context.Context) error) { s.fail.Store(&f) }

// A client that hangs up mid-request is no server fault: no ERROR line to
// page someone, and the request's log line says 499 (client closed), not 500.
func TestClientHangingUpIsNotAnError(t *testing.T) {
	st := &faultyStore{Store: testenv.Bolt(t)}
	logs := &testenv.SyncBuffer{}
	e := newEnv(t, st, httpapi.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	_, key := e.brand()
	st.failWith(func(ctx context.Context) error { // held until the client is gone
		<-ctx.Done()
		return ctx.Err()
	})

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.srv.URL+"/api/v1/offers", strings.NewReader(`{"name":"Shoes","destinationUrl":"https://shop.example/p","revenueCents":1000,"payoutCents":300,"currency":"USD"}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the stalled write answered %d", resp.StatusCode)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(logs.String(), `"path":"/api/v1/offers"`) {
		if time.Now().After(deadline) {
			t.Fatalf("no request log line:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if out := logs.String(); strings.Contains(out, `"level":"ERROR"`) || !strings.Contains(out, `"status":499`) {
		t.Errorf("a client hanging up logged:\n%s\nwant no ERROR and status 499", out)
	}
}

// Writes that keep conflicting (hundreds of writers on one cap counter) are
// retried for a while, then answered 409 conflict, never 500.
func TestEndlessConflictsAnswer409(t *testing.T) {
	st := &faultyStore{Store: testenv.Bolt(t)}
	e := newEnv(t, st, httpapi.Config{})
	_, key := e.brand()
	tries := atomic.Int64{}
	st.failWith(func(context.Context) error {
		tries.Add(1)
		return fmt.Errorf("%w: another writer", store.ErrConflict)
	})
	r := e.call("POST", "/api/v1/offers", key, map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/p", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"})
	if r.status != 409 || r.errorCode() != "conflict" || !strings.Contains(string(r.body), "retry the request") || tries.Load() <= 13 {
		t.Errorf("endless conflicts: %d %s after %d tries; want 409 conflict, after more than the old 13 tries", r.status, r.body, tries.Load())
	}
}
