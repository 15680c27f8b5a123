package webhooks

import (
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/testenv"
)

// When a probe fails its schedule, the deliveries that waited behind it
// fail with it; one parked after the probe's last attempt (a retry, a
// message that waited in the queue: its id, which sorts by its event's
// time, may still be older) saw none of it fail, and stays pending for a
// probe of its own.
func TestOnlyWhatWaitedOutAFailedProbeFailsWithIt(t *testing.T) {
	ctx := t.Context()
	now := testenv.Start()
	svc := newWorld(t, testenv.Bolt(t), withClock(func() time.Time { return now }), withLoopback())
	b, err := svc.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://127.0.0.1:9/hooks"
	if _, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")}); err != nil {
		t.Fatal(err)
	}
	evts, _, err := svc.events.Events(ctx, b.ID, records.ListParams{Limit: 1})
	if err != nil || len(evts) != 1 {
		t.Fatalf("events %v, %v", evts, err)
	}
	refs, err := svc.FanOut(ctx, evts[0].ID) // pending since now
	if err != nil || len(refs) != 1 {
		t.Fatalf("fan-out %v, %v", refs, err)
	}
	ref := refs[0]
	if abandoned, err := svc.abandonParked(ctx, ref, now.Add(-time.Minute)); err != nil || abandoned {
		t.Errorf("behind a probe whose last attempt was before it parked: abandoned %v, %v; want it left", abandoned, err)
	}
	if d, err := svc.Log.Delivery(ctx, b.ID, ref.DeliveryID); err != nil || d.Status != tally.DeliveryPending {
		t.Errorf("the delivery is %+v, %v; want pending", d.Status, err)
	}
	if abandoned, err := svc.abandonParked(ctx, ref, now.Add(time.Minute)); err != nil || !abandoned {
		t.Errorf("behind a probe whose last attempt came after it parked: abandoned %v, %v; want it failed", abandoned, err)
	}
	if d, err := svc.Log.Delivery(ctx, b.ID, ref.DeliveryID); err != nil || d.Status != tally.DeliveryFailed || len(d.Attempts) != 0 {
		t.Errorf("the delivery is %s with %d attempts, %v; want failed without one", d.Status, len(d.Attempts), err)
	}
}
