package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// requestLog keeps what a RequestObserver is told.
type requestLog struct {
	mu  sync.Mutex
	got []string
}

func (l *requestLog) RequestServed(route, method string, status int, took time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s %s %d", method, route, status))
	if took <= 0 {
		l.got = append(l.got, "no duration")
	}
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	got := l.got
	l.got = nil
	return got
}

// Each request is counted under the pattern of the route that served it
// and a method from a fixed set, so that what a client writes in its path
// or method cannot make a new series: ids, unknown and non-canonical paths
// and invented methods all fall into the few there are.
func TestRequestsObservedByRoutePattern(t *testing.T) {
	observed := &requestLog{}
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{Requests: observed})
	_, key := e.brand()
	observed.take()

	e.call("GET", "/api/v1/offers/off_01JD8X0000000000000000000A", key, nil)
	e.call("GET", "/api/v1/offers/off_01JD8X0000000000000000000B", key, nil)
	e.call("FROB", "/api/v1/offers", key, nil)
	e.call("GET", "/no/such/path/42", "", nil)
	e.call("GET", "/api/v1/./offers", key, nil)
	e.call("GET", "/api/v1/offers", "", nil)
	want := []string{
		"GET /api/v1/offers/{id} 404",
		"GET /api/v1/offers/{id} 404",
		"other /api/v1/offers 405",
		"GET / 404",
		"GET / 404",
		"GET /api/v1/offers 401",
	}
	if got := observed.take(); !slices.Equal(got, want) {
		t.Errorf("observed\n%q\nwant\n%q", got, want)
	}
}

// readStore is a store whose reads /readyz makes: each fails with err, or
// panics when err is nil.
type readStore struct{ err error }

func (s readStore) Get(context.Context, store.Key) (store.Item, error) {
	if s.err == nil {
		panic("the store broke")
	}
	return store.Item{}, s.err
}

// A Requests observer that writes the request's line (emf.Metrics) has the
// request's fields on the line of its metrics, one line a request, and the
// logger writes none; a request that fails keeps its warning or error line
// with the request's ids, as the logger writes it. Below Info, the line
// has the metrics alone, as the logger would write no request line.
func TestRequestLineWithItsMetrics(t *testing.T) {
	for _, c := range []struct {
		name, path string
		store      httpapi.StoreReader
		code       string
		logged     string // the logger's first line: its level and msg
		level      slog.Level
	}{
		{"ok", "/healthz", nil, "200", "", slog.LevelInfo},
		{"store down", "/readyz", readStore{errors.New("connection refused")}, "503", "WARN not ready: the store did not answer", slog.LevelInfo},
		{"panic", "/readyz", readStore{}, "500", "ERROR panic", slog.LevelInfo},
		{"ok at warn", "/healthz", nil, "200", "", slog.LevelWarn},
		{"panic at warn", "/readyz", readStore{}, "500", "ERROR panic", slog.LevelWarn},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, logs := &testenv.SyncBuffer{}, &testenv.SyncBuffer{}
			metrics := emf.New(out)
			h := httpapi.New(httpapi.Services{Store: c.store}, httpapi.Config{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: c.level})), Requests: metrics}).Handler(httpapi.GroupHealth)
			serve := emf.PerInvocation(metrics, func(_ context.Context, r *http.Request) (*httptest.ResponseRecorder, error) {
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				return w, nil
			})
			w, _ := serve(t.Context(), httptest.NewRequest("GET", c.path, nil))
			id := w.Header().Get("X-Request-Id")

			var line map[string]any
			if n := strings.Count(out.String(), "\n"); n != 1 || json.Unmarshal([]byte(out.String()), &line) != nil {
				t.Fatalf("%d metric lines, want one JSON line:\n%s", n, out)
			}
			want := map[string]any{"requestId": id, "route": c.path, "code": c.code, "method": "GET", "tally_http_requests_total": 1.0}
			if c.level > slog.LevelInfo {
				want["requestId"] = nil
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v", k, line[k], v)
				}
			}
			if _, ok := line["_aws"]; !ok || (line["traceId"] == nil) != (c.level > slog.LevelInfo) || line["path"] != nil || line["msg"] != nil {
				t.Errorf("the line has no _aws, or traceId at a level it should not, or the route's path again, or a msg: %v", line)
			}

			var lines []map[string]any
			for l := range strings.Lines(logs.String()) {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatal(err)
				}
				lines = append(lines, m)
			}
			switch {
			case c.logged == "" && len(lines) != 0:
				t.Errorf("the logger wrote %v, want nothing", lines)
			case c.logged != "" && (len(lines) == 0 || fmt.Sprint(lines[0]["level"], " ", lines[0]["msg"]) != c.logged):
				t.Errorf("the logger wrote %v, want first: %s", lines, c.logged)
			}
			for _, l := range lines {
				if l["requestId"] != id || l["spanId"] == nil || l["traceId"] == nil || line["traceId"] != nil && l["traceId"] != line["traceId"] {
					t.Errorf("the logger's line %v lacks the request's ids", l)
				}
			}
		})
	}
}
