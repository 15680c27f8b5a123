package webhooks

import (
	"context"
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

// senderFunc stands in for the HTTP sender where the test decides what a
// receiver answers and when (the real sender is tested in
// internal/delivery).
type senderFunc func(outgoing.Request) tally.Attempt

func (f senderFunc) Send(_ context.Context, r outgoing.Request) tally.Attempt { return f(r) }

// Two processes on one store go for the same attempt: the one that claims
// it first sends it; the other sends nothing while the claim runs, and
// takes the attempt over once it runs out (as when the first process died
// with its request under way). The attempt is recorded once.
func TestClaimHoldsAnAttemptUntilItRunsOut(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		clock := testenv.NewClock(testenv.Start())
		first := newWorld(t, st, withClock(clock.Now))
		b, err := first.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		url := "https://hooks.example.com/x"
		if _, err := first.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}}); err != nil {
			t.Fatal(err)
		}
		if _, err := first.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")}); err != nil {
			t.Fatal(err)
		}
		evts, _, err := first.events.Events(ctx, b.ID, records.ListParams{})
		if err != nil || len(evts) != 1 {
			t.Fatalf("events %v, %v", evts, err)
		}
		refs, err := first.FanOut(ctx, evts[0].ID)
		if err != nil || len(refs) != 1 {
			t.Fatalf("fan-out: %v, %v", refs, err)
		}

		sending, release := make(chan struct{}), make(chan struct{})
		firstDone := make(chan AttemptResult)
		go func() {
			res, err := first.attempt(ctx, refs[0], 1, senderFunc(func(outgoing.Request) tally.Attempt {
				close(sending)
				<-release
				return tally.Attempt{At: tally.NewTime(clock.Now()), StatusCode: 503}
			}), attemptLease)
			if err != nil {
				t.Error(err)
			}
			firstDone <- res
		}()
		<-sending

		second := newWorld(t, st, withClock(clock.Now))
		sent := 0
		ok := senderFunc(func(outgoing.Request) tally.Attempt {
			sent++
			return tally.Attempt{At: tally.NewTime(clock.Now()), StatusCode: 200}
		})
		clock.Advance(attemptLease - time.Millisecond)
		if res, err := second.attempt(ctx, refs[0], 1, ok, attemptLease); err != nil || res.Sent || sent != 0 {
			t.Errorf("while the first claim runs: %+v, %v, %d sent; want nothing sent", res, err, sent)
		}
		clock.Advance(time.Millisecond)
		if res, err := second.attempt(ctx, refs[0], 1, ok, attemptLease); err != nil || !res.Sent || sent != 1 || res.Status != tally.DeliverySucceeded {
			t.Errorf("once the claim ran out: %+v, %v, %d sent; want it sent and succeeded", res, err, sent)
		}
		close(release)
		if res := <-firstDone; res.Status != tally.DeliverySucceeded || res.Attempts != 1 {
			t.Errorf("the first process's late answer: %+v; want the second's outcome, one attempt", res)
		}
		d, err := first.Log.Delivery(ctx, b.ID, refs[0].DeliveryID)
		if err != nil || d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 200 {
			t.Errorf("delivery %+v, %v; want succeeded with the one attempt recorded", d, err)
		}
	})
}
