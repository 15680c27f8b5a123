package httpapi_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// timingReceiver accepts every request and notes when it came.
type timingReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	at  []time.Time
}

func newTimingReceiver(t *testing.T) *timingReceiver {
	r := &timingReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.mu.Lock()
		r.at = append(r.at, time.Now())
		r.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *timingReceiver) times() []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.at)
}

// maxInWindow is the most requests that came within any span of w.
func maxInWindow(at []time.Time, w time.Duration) int {
	most := 0
	for i := range at {
		n := 0
		for j := i; j < len(at) && at[j].Sub(at[i]) < w; j++ {
			n++
		}
		most = max(most, n)
	}
	return most
}

// A subscription and a postback with maxPerSecond get no more than that
// (a second's worth, two more where a late timer catches up), every
// delivery succeeding at its first attempt: waiting is neither a failure
// nor an attempt. An unpaced subscription beside them gets its deliveries
// at once. Out-of-range values are refused, naming the field, and change
// nothing.
func TestEndpointPace(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		const pace, conversions = 10, 40
		e := newPipelineEnv(t, st)
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		paced, free, pb := newTimingReceiver(t), newTimingReceiver(t), newTimingReceiver(t)
		pacedSub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": paced.srv.URL, "events": []string{"conversion.created"}, "maxPerSecond": pace})).field(t, "id")
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": free.srv.URL, "events": []string{"conversion.created"}}))
		pbPath := "/api/v1/partners/" + partner + "/postback"
		e.must(200, e.call("PUT", pbPath, key, map[string]any{"url": pb.srv.URL + "/pb?c={conversion_id}", "maxPerSecond": pace}))

		for _, bad := range []any{0, 1001, -3, 2.5, "fast"} {
			for _, c := range []struct{ method, path string }{{"POST", "/api/public/webhooks"}, {"PATCH", "/api/public/webhooks/" + pacedSub}, {"PUT", pbPath}} {
				body := map[string]any{"url": free.srv.URL, "events": []string{"conversion.created"}, "maxPerSecond": bad}
				if r := e.call(c.method, c.path, key, body); r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(errorMessage(r), "maxPerSecond") {
					t.Errorf("%s %s maxPerSecond %v: %d %s, want 422 naming maxPerSecond", c.method, c.path, bad, r.status, r.body)
				}
			}
		}
		var sub tally.Subscription
		e.must(200, e.call("GET", "/api/public/webhooks/"+pacedSub, key, nil)).decode(t, &sub)
		var postback tally.Postback
		e.must(200, e.call("GET", pbPath, key, nil)).decode(t, &postback)
		if sub.MaxPerSecond == nil || *sub.MaxPerSecond != pace || sub.URL != paced.srv.URL || postback.MaxPerSecond == nil || *postback.MaxPerSecond != pace {
			t.Fatalf("after the refused changes: subscription %+v, postback %+v; want both at %d a second as made", sub.MaxPerSecond, postback.MaxPerSecond, pace)
		}

		for i := range conversions {
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": fmt.Sprintf("order-%d", i)}))
		}
		made := time.Now() // the last conversion
		ds := e.waitFor(key, "", "every delivery to succeed", func(ds []tally.Delivery) bool {
			return len(ds) == 3*conversions && !slices.ContainsFunc(ds, func(d tally.Delivery) bool { return d.Status != tally.DeliverySucceeded })
		})
		for _, d := range ds {
			if len(d.Attempts) != 1 {
				t.Errorf("delivery %s to %s%s: %d attempts, want 1: waiting for its turn is not an attempt", d.ID, d.SubscriptionID, d.PartnerID, len(d.Attempts))
			}
		}
		for name, r := range map[string]*timingReceiver{"the paced subscription": paced, "the paced postback": pb} {
			at := r.times()
			if most := maxInWindow(at, time.Second); len(at) != conversions || most > pace+2 {
				t.Errorf("%s got %d requests, at most %d within a second; want %d, at most %d", name, len(at), most, conversions, pace+2)
			}
			if span := at[len(at)-1].Sub(at[0]); span < (conversions-pace-1)*time.Second/pace {
				t.Errorf("%s got %d requests in %v: faster than %d a second", name, len(at), span, pace)
			}
		}
		// The paced endpoints' backlog delays no one else: the unpaced
		// subscription had its last delivery soon after the last
		// conversion, not behind the paced ones.
		if f, p := free.times(), paced.times(); len(f) != conversions || f[len(f)-1].Sub(made) > 1500*time.Millisecond {
			t.Errorf("the unpaced subscription's last request came %v after the last conversion (the paced one's %v); want it within 1.5 s", f[len(f)-1].Sub(made), p[len(p)-1].Sub(made))
		}
	})
}
