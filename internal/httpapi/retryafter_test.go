package httpapi_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// steeringReceiver answers its first request with status and a Retry-After
// header (when retryAfter gives one), and 204 after.
type steeringReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	n   int
}

func newSteeringReceiver(t *testing.T, status int, retryAfter func() string) *steeringReceiver {
	r := &steeringReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.n++
		first := r.n == 1
		r.mu.Unlock()
		if !first {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		if retryAfter != nil {
			w.Header().Set("Retry-After", retryAfter())
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// Receivers steer retries: a 429 or 503 with Retry-After (seconds or an
// HTTP date) puts the next attempt at least that far off; a negative, huge
// or unreadable one leaves the schedule (1 s) as it is; a 410 fails the
// delivery at once and disables the endpoint ("gone").
func TestReceiversSteerRetries(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		_, key := e.brand()
		cases := []struct {
			name   string
			status int
			header func() string
			wait   time.Duration // after attempt 1
		}{
			{"seconds", 503, func() string { return "120" }, 120 * time.Second},
			{"date", 429, func() string { return e.clock.Now().Add(300 * time.Second).UTC().Format(http.TimeFormat) }, 300 * time.Second},
			{"shorter than the schedule", 429, func() string { return "0" }, time.Second},
			{"negative", 503, func() string { return "-5" }, time.Second},
			{"over a day", 503, func() string { return "86401" }, time.Second},
			{"garbage", 503, func() string { return "soon" }, time.Second},
			{"none", 503, nil, time.Second},
		}
		subs := make([]string, len(cases))
		for i, c := range cases {
			rcv := newSteeringReceiver(t, c.status, c.header)
			subs[i] = e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": rcv.srv.URL, "events": []string{"cap.reached"}})).field(t, "id")
			e.must(202, e.call("POST", "/api/public/webhooks/"+subs[i]+"/test", key, nil))
		}
		for i, c := range cases {
			d := e.waitFor(key, "subscriptionId="+subs[i], c.name+": attempt 1", attemptsMade(1))[0]
			if d.Status != tally.DeliveryPending || d.NextAttemptAt == nil {
				t.Fatalf("%s: %+v, want pending with a next attempt", c.name, d)
			}
			// The HTTP date has whole seconds: allow the second it cut.
			if got := d.NextAttemptAt.Sub(d.Attempts[0].At.Time); got < c.wait-time.Second || got > c.wait {
				t.Errorf("%s: next attempt %v after attempt 1, want %v", c.name, got, c.wait)
			}
		}
		e.advance(time.Second)
		for i, c := range cases {
			if c.wait == time.Second {
				e.waitFor(key, "subscriptionId="+subs[i], c.name+": the retry", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded })
			}
		}
		e.advance(119 * time.Second)
		e.waitFor(key, "subscriptionId="+subs[0], "the retry Retry-After: 120 asked for", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded })
		if ds := e.deliveries(key, "subscriptionId="+subs[1]); ds[0].Status != tally.DeliveryPending || len(ds[0].Attempts) != 1 {
			t.Errorf("date: retried before the date: %+v", ds[0])
		}
		e.advance(180 * time.Second)
		e.waitFor(key, "subscriptionId="+subs[1], "the retry at the date", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded })

		// 410 Gone: failed at once, the subscription disabled as gone, and
		// the next event not delivered to it.
		gone := newSteeringReceiver(t, http.StatusGone, nil)
		sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": gone.srv.URL, "events": []string{"cap.reached"}})).field(t, "id")
		e.must(202, e.call("POST", "/api/public/webhooks/"+sub+"/test", key, nil))
		d := e.waitFor(key, "subscriptionId="+sub, "the 410", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliveryFailed })[0]
		if len(d.Attempts) != 1 || d.NextAttemptAt != nil {
			t.Errorf("410: %+v, want failed after its one attempt", d)
		}
		var s tally.Subscription
		e.must(200, e.call("GET", "/api/public/webhooks/"+sub, key, nil)).decode(t, &s)
		if s.Status != tally.EndpointDisabled || s.DisabledReason != "gone" || s.DisabledAt == nil {
			t.Errorf("410: subscription %+v, want disabled, reason gone", s.EndpointHealth)
		}
		e.advance(time.Hour)
		gone.mu.Lock()
		defer gone.mu.Unlock()
		if gone.n != 1 {
			t.Errorf("the gone receiver got %d requests, want 1", gone.n)
		}
	})
}
