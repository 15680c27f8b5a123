package httpapi_test

import (
	"context"
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

// stalledStore holds every write until the request that made it is gone,
// like a store stuck behind a slow disk while the client gives up.
type stalledStore struct {
	store.Store
	stalled atomic.Bool
}

func (s *stalledStore) Transact(ctx context.Context, ops ...store.Op) error {
	if s.stalled.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Transact(ctx, ops...)
}

// A client that hangs up mid-request is no server fault: no ERROR line to
// page someone, and the request's log line says 499 (client closed), not 500.
func TestClientHangingUpIsNotAnError(t *testing.T) {
	st := &stalledStore{Store: testenv.Bolt(t)}
	logs := &testenv.SyncBuffer{}
	e := newEnv(t, st, httpapi.Config{Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	_, key := e.brand()
	st.stalled.Store(true)

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
