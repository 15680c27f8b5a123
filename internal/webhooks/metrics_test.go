package webhooks

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// attemptLog keeps what an Observer is told.
type attemptLog struct {
	mu  sync.Mutex
	got []string
}

func (l *attemptLog) AttemptRecorded(deliveryType, outcome string, latency time.Duration, sent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, fmt.Sprintf("%s %s %v sent=%v", deliveryType, outcome, latency, sent))
}

// An operator sees how many attempts are due and how late the oldest is:
// failed first attempts become due when their retry's wait ends, and
// leave the count as they are made. The observer hears of each attempt
// with its outcome and latency.
func TestBacklogCountsDueAttempts(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		clock := testenv.NewClock(testenv.Start())
		observed := &attemptLog{}
		w := newWorld(t, st, withClock(clock.Now), withObserver(observed))
		b, err := w.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		url := "https://hooks.example.com/x"
		if _, err := w.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if _, err := w.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo(fmt.Sprintf("pat%d@example.com", i))}); err != nil {
				t.Fatal(err)
			}
		}
		evts, _, err := w.events.Events(ctx, b.ID, records.ListParams{})
		if err != nil || len(evts) != 3 {
			t.Fatalf("events %v, %v", evts, err)
		}
		answer := 503
		sender := senderFunc(func(outgoing.Request) tally.Attempt {
			return tally.Attempt{At: tally.NewTime(clock.Now()), StatusCode: answer, LatencyMs: 42}
		})
		var refs []endpoints.DeliveryRef
		for _, evt := range evts {
			r, err := w.FanOut(ctx, evt.ID)
			if err != nil || len(r) != 1 {
				t.Fatalf("fan-out: %v, %v", r, err)
			}
			if _, err := w.Attempt(ctx, r[0], 1, sender); err != nil {
				t.Fatal(err)
			}
			refs = append(refs, r[0])
		}

		backlog := func(want Backlog) {
			t.Helper()
			if got, err := w.Backlog(ctx); err != nil || got != want {
				t.Errorf("backlog %+v, %v; want %+v", got, err, want)
			}
		}
		backlog(Backlog{}) // the retries wait a second
		clock.Advance(5 * time.Second)
		backlog(Backlog{Due: 3, Lag: 4 * time.Second})
		answer = 200
		if _, err := w.Attempt(ctx, refs[0], 2, sender); err != nil {
			t.Fatal(err)
		}
		backlog(Backlog{Due: 2, Lag: 4 * time.Second})

		want := slices.Repeat([]string{"webhook retrying 42ms sent=true"}, 3)
		want = append(want, "webhook succeeded 42ms sent=true")
		if !slices.Equal(observed.got, want) {
			t.Errorf("observed %q; want %q", observed.got, want)
		}
	})
}
