package service_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// TestBlockedReceiverFailsAtOnce: an attempt the SSRF guard refuses
// (blocked_address) would be refused every time, so the delivery fails at
// once, with that reason in its log, and is not scheduled again. (The
// subscription points at loopback, allowed when it was made, as on the local
// server; the attempt uses the cloud's sender, which refuses loopback.)
func TestBlockedReceiverFailsAtOnce(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		f := &fixture{t: t, ctx: ctx, st: st, clock: testenv.NewClock(start)}
		f.svc = servicetest.New(st, service.WithClock(f.clock.Now), service.WithLoopbackReceivers())
		b, err := f.svc.Identity.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		f.brandID = b.ID
		rcv := newReceiver(t, http.StatusOK)
		url := rcv.srv.URL + "/hooks"
		sub, err := f.svc.Endpoints.CreateSubscription(ctx, f.brandID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}})
		if err != nil {
			t.Fatal(err)
		}
		f.partner(false)
		evt := f.events(tally.EventPartnerApplied)[0]
		refs, err := f.svc.Webhooks.FanOut(ctx, evt.ID)
		if err != nil || len(refs) != 1 {
			t.Fatalf("fan-out: %v %v", refs, err)
		}

		cloud := delivery.NewSender(delivery.Options{})
		res, err := f.svc.Webhooks.Attempt(ctx, refs[0], 1, cloud)
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != tally.DeliveryFailed || res.RetryIn != 0 {
			t.Errorf("attempt 1 refused by the guard: %+v, want failed with nothing scheduled", res)
		}
		d, err := f.svc.Deliveries.Delivery(ctx, f.brandID, refs[0].DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		if d.Status != tally.DeliveryFailed || len(d.Attempts) != 1 || d.Attempts[0].Error != tally.AttemptBlocked || d.NextAttemptAt != nil || d.SubscriptionID != sub.ID {
			t.Errorf("delivery %+v, want failed after one blocked_address attempt", d)
		}
		// A later step sends nothing; nothing is due.
		if again, err := f.svc.Webhooks.Attempt(ctx, refs[0], 2, cloud); err != nil || again.Sent || again.Status != tally.DeliveryFailed {
			t.Errorf("attempt 2: %+v %v, want nothing sent", again, err)
		}
		if n := len(rcv.requests()); n != 0 {
			t.Errorf("the receiver got %d requests through the cloud's sender", n)
		}
		// The brand can still ask again by hand (say, after fixing its DNS).
		if d, err := f.svc.Deliveries.RetryDelivery(ctx, f.brandID, refs[0].DeliveryID); err != nil || d.Status != tally.DeliveryPending {
			t.Errorf("manual retry: %+v %v", d, err)
		}
	})
}
