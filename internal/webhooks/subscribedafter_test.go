package webhooks

import (
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// An event fanned out again later (its stream batch given up, hours
// after) goes to the subscriptions there were when it happened, give or
// take the functions' clocks: not to one created since.
func TestAFanOutLaterSkipsSubscriptionsCreatedSince(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		now := testenv.Start()
		svc := newWorld(t, st, withClock(func() time.Time { return now }), withLoopback())
		b, err := svc.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		subscribe := func(path string) string {
			t.Helper()
			url := "http://127.0.0.1:9/" + path
			sub, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}})
			if err != nil {
				t.Fatal(err)
			}
			return sub.ID
		}
		before := subscribe("before")
		if _, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(30 * time.Second)
		skewed := subscribe("skewed") // within the clocks' disagreement
		now = now.Add(2 * time.Hour)
		subscribe("since")
		evts, _, err := svc.events.Events(ctx, b.ID, records.ListParams{Limit: 1})
		if err != nil || len(evts) != 1 {
			t.Fatalf("events %v, %v", evts, err)
		}
		refs, err := svc.FanOut(ctx, evts[0].ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ref := range refs {
			d, err := svc.Log.Delivery(ctx, b.ID, ref.DeliveryID)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, d.SubscriptionID)
		}
		if len(got) != 2 || !(got[0] == before && got[1] == skewed || got[0] == skewed && got[1] == before) {
			t.Errorf("the event went to %v, want %s and %s, not the subscription created 2 hours after it", got, before, skewed)
		}
	})
}
