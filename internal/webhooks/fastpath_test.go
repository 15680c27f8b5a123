package webhooks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/webhook"
)

// deliveryWrites is the embedded store, noting each committed write of a
// delivery item: its status and attempt count.
type deliveryWrites struct {
	store.Store
	mu     sync.Mutex
	writes map[string][]string // delivery id → "status/attempts", one a write
}

func (w *deliveryWrites) Transact(ctx context.Context, ops ...store.Op) error {
	err := w.Store.Transact(ctx, ops...)
	if err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, op := range ops {
		if op.Kind == store.OpPut && strings.HasPrefix(op.Item.SK, "wh_") {
			w.writes[op.Item.SK] = append(w.writes[op.Item.SK], op.Item.Attrs["status"]+"/"+op.Item.Attrs["attempts"])
		}
	}
	return nil
}

// of returns the writes of a delivery once there are at least n: a write
// is seen in the store a moment before Transact returns and it is noted.
// The writes of a delivery follow one another, so those before the nth
// are noted by then.
func (w *deliveryWrites) of(t *testing.T, id string, n int) []string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		w.mu.Lock()
		writes := slices.Clone(w.writes[id])
		w.mu.Unlock()
		if len(writes) >= n {
			return writes
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s was written %v; want at least %d writes", id, writes, n)
		}
	}
}

// runPipeline runs svc's local pipeline on loopback until the test ends
// or stop is called; firstWait is how long a fan-out waits for first
// attempts. stop returns once every attempt under way is recorded.
func runPipeline(t *testing.T, svc *world, firstWait time.Duration) (stop func()) {
	p := svc.newPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), 4)
	if !p.fast {
		t.Fatal("the pipeline on the embedded store does not take the fast path")
	}
	p.firstWait = firstWait
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

// waitForDelivery polls the brand's one delivery with a generous deadline
// until cond holds.
func waitForDelivery(t *testing.T, svc *world, brandID, what string, cond func(tally.Delivery) bool) tally.Delivery {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ds, _, err := svc.Deliveries(t.Context(), brandID, endpoints.DeliveryFilter{}, records.ListParams{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 && cond(ds[0]) {
			return ds[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %+v", what, ds)
		}
	}
}

// A webhook to a healthy receiver with room for it is written once: with
// its first attempt, in the fan-out's write. The delivery log never shows
// it pending without an attempt, and the receiver gets it once.
func TestFirstAttemptIsWrittenWithTheDelivery(t *testing.T) {
	ctx := t.Context()
	st := &deliveryWrites{Store: testenv.Bolt(t), writes: map[string][]string{}}
	var mu sync.Mutex
	hits := map[string]int{}
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits[r.Header.Get(webhook.WebhookIDHeader)]++
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)
	svc := newWorld(t, st, withLoopback())
	// However slow the machine, the fan-out waits for the receiver here.
	runPipeline(t, svc, time.Minute)
	b, err := svc.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &rcv.URL, Events: []string{tally.EventPartnerApplied}})
	if err != nil {
		t.Fatal(err)
	}
	// One event at a time, so that the endpoint always has room.
	const events = 5
	for i := range events {
		if _, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo(fmt.Sprintf("p%d@example.com", i))}); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			ds, _, err := svc.Deliveries(ctx, b.ID, endpoints.DeliveryFilter{Status: tally.DeliverySucceeded}, records.ListParams{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			if len(ds) == i+1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for delivery %d", i+1)
			}
		}
	}
	ds, _, err := svc.Deliveries(ctx, b.ID, endpoints.DeliveryFilter{}, records.ListParams{Limit: 100})
	if err != nil || len(ds) != events {
		t.Fatalf("deliveries %v, %v; want %d", ds, err, events)
	}
	for _, d := range ds {
		if w := st.of(t, d.ID, 1); len(w) != 1 || w[0] != tally.DeliverySucceeded+"/1" {
			t.Errorf("delivery %s was written %v; want once, succeeded with its attempt", d.ID, w)
		}
		if len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 200 {
			t.Errorf("delivery %s shows attempts %+v; want the one that succeeded", d.ID, d.Attempts)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hits) != events {
		t.Errorf("the receiver got %d deliveries, want %d", len(hits), events)
	}
	for id, n := range hits {
		if n != 1 {
			t.Errorf("the receiver got %s %d times, want once", id, n)
		}
	}
	if s, err := svc.Subscription(ctx, b.ID, sub.ID); err != nil || s.LastSuccessAt == nil {
		t.Errorf("subscription health %+v, %v; want its last success", s.EndpointHealth, err)
	}
}

// A first attempt to a receiver that does not answer in time does not hold
// the fan-out up: the delivery is written pending, and the attempt is
// recorded when the answer comes, once.
func TestLateFirstAttemptIsRecordedWhenItAnswers(t *testing.T) {
	ctx := t.Context()
	st := &deliveryWrites{Store: testenv.Bolt(t), writes: map[string][]string{}}
	release := make(chan struct{})
	var hits atomic.Int64
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(rcv.Close)
	svc := newWorld(t, st, withLoopback())
	runPipeline(t, svc, firstAttemptWait)
	b, err := svc.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &rcv.URL, Events: []string{tally.EventPartnerApplied}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); hits.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for attempt 1 to reach the receiver")
		}
	}
	d := waitForDelivery(t, svc, b.ID, "the delivery written while its attempt hangs", func(d tally.Delivery) bool { return true })
	if d.Status != tally.DeliveryPending || len(d.Attempts) != 0 || hits.Load() != 1 {
		t.Errorf("while the receiver holds attempt 1: %s with %d attempts, %d requests; want pending, none recorded, one under way", d.Status, len(d.Attempts), hits.Load())
	}
	close(release)
	d = waitForDelivery(t, svc, b.ID, "the attempt to be recorded", func(d tally.Delivery) bool { return d.Status != tally.DeliveryPending })
	if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 || hits.Load() != 1 {
		t.Errorf("after the answer: %s with %d attempts, %d requests; want succeeded with the one attempt", d.Status, len(d.Attempts), hits.Load())
	}
	if w := st.of(t, d.ID, 2); len(w) != 2 || w[0] != tally.DeliveryPending+"/0" || w[1] != tally.DeliverySucceeded+"/1" {
		t.Errorf("delivery written %v; want pending without an attempt, then with it", w)
	}
}

// First attempts recorded together count in their endpoint's health as
// one by one would, even when the endpoint changed after it was read.
func TestFirstAttemptsOfABatchCountExactlyInHealth(t *testing.T) {
	ctx := t.Context()
	clock := testenv.NewClock(testenv.Start())
	svc := newWorld(t, testenv.Bolt(t), withClock(clock.Now))
	b, err := svc.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	url := "https://hooks.example.com/x"
	sub, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}})
	if err != nil {
		t.Fatal(err)
	}
	batch := func(n, status int) []*fanOutPlan {
		t.Helper()
		var ids []string
		for range n {
			p, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo(fmt.Sprintf("%d@example.com", clock.Now().UnixNano()))})
			if err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Millisecond)
			evts, _, err := svc.events.Events(ctx, b.ID, records.ListParams{Limit: 1})
			if err != nil || len(evts) != 1 || !strings.Contains(string(evts[0].Data), p.ID) {
				t.Fatalf("the event of %s: %v, %v", p.ID, evts, err)
			}
			ids = append(ids, evts[0].ID)
		}
		plans, err := svc.planFanOuts(ctx, ids)
		if err != nil || len(plans) != n {
			t.Fatalf("plans: %d, %v", len(plans), err)
		}
		for _, plan := range plans {
			plan.first[0] = &firstAttempt{at: tally.Attempt{At: tally.NewTime(clock.Now()), StatusCode: status}, answered: true}
		}
		return plans
	}
	check := func(plans []*fanOutPlan, wantStatus string, wantFails int64) {
		t.Helper()
		recs, err := svc.writeFanOuts(ctx, plans)
		if err != nil || len(recs) != 0 {
			t.Fatalf("write: %v, %v; want nothing left to attempt", recs, err)
		}
		for _, plan := range plans {
			f := plan.first[0]
			d, err := svc.Log.Delivery(ctx, b.ID, plan.recs[0].ID)
			if err != nil || !f.recorded || f.result.Status != wantStatus || d.Status != wantStatus || len(d.Attempts) != 1 {
				t.Errorf("delivery %+v, %v (recorded %v, %+v); want %s with its attempt", d, err, f.recorded, f.result, wantStatus)
			}
		}
		// Failed attempts that are retried count for the circuit breaker
		// (fails), not toward disabling the endpoint.
		it, err := svc.db.Get(ctx, keys.Subscription(b.ID, sub.ID))
		if h := endpoints.HealthOf(it); err != nil || h.Fails != wantFails || h.Failed != 0 {
			t.Errorf("subscription health %+v, %v; want %d consecutive failed attempts, no failed delivery", h, err, wantFails)
		}
	}

	failures := batch(5, 500)
	// The endpoint changes after the fan-out read it.
	if _, err := svc.UpdateSubscription(ctx, b.ID, sub.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied, tally.EventCapReached}}); err != nil {
		t.Fatal(err)
	}
	check(failures, tally.DeliveryPending, 5)
	check(batch(3, 500), tally.DeliveryPending, 8)
	successes := batch(2, 200)
	check(successes, tally.DeliverySucceeded, 0)
	if s, _ := svc.Subscription(ctx, b.ID, sub.ID); s.LastSuccessAt == nil || s.FailingSince != nil {
		t.Errorf("after successes: %+v; want the last success, not failing", s.EndpointHealth)
	}
}

// An event whose delivery was made before, and which is found in the outbox
// again (a crash before it left), is fanned out again: its first attempt
// may go out again under the same webhook id, but the delivery as stored
// keeps its own history; the repeated answer is not added to a delivery
// that has succeeded.
func TestRepeatedFanOutLeavesADecidedDeliveryAlone(t *testing.T) {
	ctx := t.Context()
	st := testenv.Bolt(t)
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(rcv.Close)
	svc := newWorld(t, st, withLoopback())
	b, err := svc.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &rcv.URL, Events: []string{tally.EventPartnerApplied}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")}); err != nil {
		t.Fatal(err)
	}
	evts, _, err := svc.events.Events(ctx, b.ID, records.ListParams{Limit: 1})
	if err != nil || len(evts) != 1 {
		t.Fatalf("events %v, %v", evts, err)
	}
	event, err := st.Get(ctx, keys.Event(evts[0].ID))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := svc.FanOut(ctx, evts[0].ID)
	if err != nil || len(recs) != 1 {
		t.Fatalf("fan-out %v, %v", recs, err)
	}
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true})
	if _, err := svc.Attempt(ctx, endpoints.DeliveryRef{BrandID: b.ID, DeliveryID: recs[0].DeliveryID}, 1, sender); err != nil {
		t.Fatal(err)
	}
	if err := st.Transact(ctx, store.Put(event)); err != nil { // back in the outbox, as read before it left
		t.Fatal(err)
	}
	stop := runPipeline(t, svc, time.Minute)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		it, err := st.Get(ctx, event.Key)
		if err != nil {
			t.Fatal(err)
		}
		if it.GSI3.PK == "" {
			break // fanned out again
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for the event to leave the outbox again")
		}
	}
	stop() // every attempt under way recorded
	d, err := svc.Log.Delivery(ctx, b.ID, recs[0].DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 {
		t.Errorf("the delivery shows %s with %d attempts after the repeated fan-out; want succeeded with its one attempt", d.Status, len(d.Attempts))
	}
}
