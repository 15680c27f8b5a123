package webhooks

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// With a Pacer, attempt 1 of a delivery to an endpoint whose pace is used
// up for the second is not made: the step says paced and when to ask
// again, writes nothing (the delivery carried in its message stays
// unwritten, its event in the outbox), and makes it in a later second. An
// unpaced endpoint's attempts write no counter.
func TestPacedAttemptWaitsWithoutAWrite(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		now := testenv.Start().Truncate(time.Second).Add(100 * time.Millisecond)
		svc := newWorld(t, st, withClock(func() time.Time { return now }), withLoopback(), withPace())
		b, err := svc.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		pacedURL, freeURL, two := "http://127.0.0.1:9/paced", "http://127.0.0.1:9/free", 2
		paced, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &pacedURL, Events: []string{tally.EventPartnerApplied}, MaxPerSecond: &two})
		if err != nil {
			t.Fatal(err)
		}
		free, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &freeURL, Events: []string{tally.EventPartnerApplied}})
		if err != nil {
			t.Fatal(err)
		}
		sent := map[string]int{}
		sender := senderFunc(func(r outgoing.Request) tally.Attempt {
			sent[r.URL]++
			return tally.Attempt{At: tally.NewTime(now), StatusCode: 204}
		})
		var msgs []DeliveryMessage // the paced subscription's
		for i := range 3 {
			if _, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo(fmt.Sprintf("pat%d@example.com", i))}); err != nil {
				t.Fatal(err)
			}
			evts, _, err := svc.events.Events(ctx, b.ID, records.ListParams{Limit: 1})
			if err != nil || len(evts) != 1 {
				t.Fatalf("events %v, %v", evts, err)
			}
			dispatched, err := svc.Dispatch(ctx, evts[0].ID, nil)
			if err != nil || len(dispatched) != 2 {
				t.Fatalf("dispatch: %+v, %v; want two planned deliveries", dispatched, err)
			}
			for _, m := range dispatched {
				if m.Planned == nil {
					t.Fatalf("dispatch: %+v, want the deliveries carried", m)
				}
				if _, err := svc.FirstAttempt(ctx, m, sender); err != nil {
					t.Fatal(err)
				}
			}
			msgs = append(msgs, dispatched...)
		}
		if sent[pacedURL] != 2 || sent[freeURL] != 3 {
			t.Fatalf("sent %v, want 2 to the paced subscription (its pace) and 3 to the other", sent)
		}

		// The third paced one, again within the second: still its turn to wait.
		var third DeliveryMessage
		for _, m := range msgs {
			if it, err := svc.db.Get(ctx, keys.Delivery(b.ID, m.DeliveryID)); errors.Is(err, store.ErrNotFound) {
				third = m
			} else if err != nil || it.Attrs["status"] != tally.DeliverySucceeded {
				t.Fatalf("delivery %s: %+v, %v", m.DeliveryID, it.Attrs, err)
			}
		}
		res, err := svc.FirstAttempt(ctx, third, sender)
		if err != nil || !res.Paced || res.Sent || res.Attempts != 0 || res.Status != tally.DeliveryPending ||
			res.NextAttemptAt == nil || !res.NextAttemptAt.After(now) || res.NextAttemptAt.After(now.Add(2*time.Second)) {
			t.Fatalf("the third paced attempt in a second: %+v, %v; want paced, nothing sent, next within 2 s", res, err)
		}
		if _, err := svc.db.Get(ctx, keys.Delivery(b.ID, third.DeliveryID)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("after the wait the delivery reads %v, want it still unwritten", err)
		}
		event, err := svc.db.Get(ctx, keys.Event(mustPlanned(t, third).EventID))
		if err != nil || !inOutbox(event) {
			t.Errorf("its event: in the outbox %v, %v; want it kept there until the delivery is written", inOutbox(event), err)
		}
		window := now.Truncate(time.Second).Unix()
		if _, err := svc.db.Get(ctx, keys.Rate(PaceBucket(b.ID, free.ID), window)); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("the unpaced subscription's counter reads %v, want none written", err)
		}
		if _, err := svc.db.Get(ctx, keys.Rate(PaceBucket(b.ID, paced.ID), window)); err != nil {
			t.Errorf("the paced subscription's counter: %v", err)
		}

		now = res.NextAttemptAt.Time
		res, err = svc.FirstAttempt(ctx, third, sender)
		if err != nil || res.Paced || res.Status != tally.DeliverySucceeded || sent[pacedURL] != 3 {
			t.Fatalf("in its turn: %+v, %v, sent %v; want it made and succeeded", res, err, sent)
		}
		d, err := svc.Log.Delivery(ctx, b.ID, third.DeliveryID)
		if err != nil || len(d.Attempts) != 1 {
			t.Errorf("the delivery: %+v, %v; want one attempt: the wait was none", d, err)
		}
		if event, err := svc.db.Get(ctx, keys.Event(d.EventID)); err != nil || inOutbox(event) {
			t.Errorf("its event: in the outbox %v, %v; want it out, every delivery written", inOutbox(event), err)
		}
	})
}

func mustPlanned(t *testing.T, m DeliveryMessage) endpoints.DeliveryRecord {
	t.Helper()
	rec, err := m.planned()
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
