package httpapi_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
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
