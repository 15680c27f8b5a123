package lambdafn_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
)

// forEachStore runs fn on the embedded store and on DynamoDB Local.
func forEachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	t.Run("bolt", func(t *testing.T) { fn(t, testenv.Bolt(t)) })
	t.Run("dynamodb", func(t *testing.T) { fn(t, testenv.DynamoDB(t)) })
}

// subscribedFixture is a fixture on st whose events so far are fanned
// out, with a subscription to partner.applied.
func subscribedFixture(t *testing.T, st store.Store) *fixture {
	t.Helper()
	f := newFixture(t, st)
	f.fanOutAll(t)
	f.subscribe(t, []string{tally.EventPartnerApplied}, "")
	return f
}

// reconciler is the handler of the deployed reconciler, changed by change
// (when not nil), over webhooks and the fixture's delivery queue, and the
// buffer its metrics go to.
func (f *fixture) reconciler(t *testing.T, webhooks *webhooks.Engine, change func(*fanout.Reconciler)) (func(context.Context, events.EventBridgeEvent) (fanout.ReconcilerResult, error), *testenv.SyncBuffer) {
	out := &testenv.SyncBuffer{}
	r := fanout.DefaultReconciler
	r.Metrics = emf.New(out)
	if change != nil {
		change(&r)
	}
	q := f.deliveryQueue(t)
	return r.Handler(webhooks, q.client, q.URL, f.cfg.Logger), out
}

// TestReconcilerSaysItDefers checks that a run that defers to the delivery
// queue's backlog is not quiet: it logs at WARN and writes
// ReconcilerDeferrals 1 (ReconcilerDeferralsAlarm), and 0 once it re-drives
// again.
func TestReconcilerSaysItDefers(t *testing.T) {
	f := subscribedFixture(t, testenv.DynamoDB(t))
	f.applied(t, "Trail Tales")
	q := f.deliveryQueue(t)
	for _, id := range []string{"wh_01kaqj3f8v5m2w7x9c4d6e8g0h", "wh_01kaqj3f8v5m2w7x9c4d6e8g0j"} {
		if err := queue.Requeue(q.client, q.URL)(t.Context(), endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: id}); err != nil {
			t.Fatal(err)
		}
	}
	h, out := f.reconciler(t, f.svc.Webhooks, func(r *fanout.Reconciler) { r.Backlog = 2 })
	f.clock.Add(time.Hour)
	f.logs.take(t)
	if res, _ := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{}); !res.Deferred {
		t.Fatalf("with 2 messages waiting: %+v, want a deferral", res)
	}
	warned := slices.ContainsFunc(f.logs.take(t), func(l map[string]any) bool {
		return l["level"] == "WARN" && strings.Contains(fmt.Sprint(l["msg"]), "backlog")
	})
	if !warned {
		t.Error("no WARN line about the backlog")
	}
	q.messages(t) // deliver catches up
	if res, err := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{}); err != nil || res.Deferred {
		t.Fatalf("with the queue empty: %+v, %v; want no deferral", res, err)
	}
	if got := emfSamples(t, out.String())["ReconcilerDeferrals{FunctionName=}"]; !slices.Equal(got, []float64{1, 0}) {
		t.Errorf("ReconcilerDeferrals %v, want [1 0]: the deferral, then a run that re-drove", got)
	}
}

// TestReconcilerSkipsAPoisonItem checks that an overdue entry the
// reconciler cannot decode does not stop the run: the other overdue
// delivery and the dropped event are re-driven, the entry is counted
// (ReconcilerSkipped), the run reports an error, and the entry is tried
// again only after its backoff, which doubles.
func TestReconcilerSkipsAPoisonItem(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		f := subscribedFixture(t, st)
		evt := f.applied(t, "Runner Media")
		if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
			t.Fatal(err)
		}
		dropped := f.applied(t, "Trail Tales")
		poison := store.Item{Key: store.Key{PK: keys.BrandPK(f.brand.ID), SK: "wh_poison"},
			GSI3: store.IndexKey{PK: keys.DueQueuePK(0), SK: keys.DueQueueSK(f.clock.Now(), "wh_poison")},
			Data: []byte("{not json")}
		if err := st.Transact(t.Context(), store.Put(poison)); err != nil {
			t.Fatal(err)
		}
		q := f.deliveryQueue(t)
		h, out := f.reconciler(t, f.svc.Webhooks, nil)
		// A run that skips reports it (ReconcilerFunctionErrorsAlarm); one that
		// passes over the item in its backoff does not.
		run := func(after time.Duration) fanout.ReconcilerResult {
			t.Helper()
			f.clock.Add(after)
			res, err := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
			if (err != nil) != (res.Skipped > 0) {
				t.Errorf("reconciler: %+v, %v; want an error exactly when it skipped", res, err)
			}
			return res
		}
		if res := run(time.Hour); res.Events != 1 || res.Deliveries != 1 || res.Skipped != 1 {
			t.Errorf("with a poison entry: %+v; want the event and the good delivery re-driven, one skipped", res)
		}
		d := f.deliveriesOf(t, evt.ID)[f.subs[0].ID]
		got := q.messages(t)
		if !slices.Contains(got, messageBody(f.brand.ID, d.ID)) {
			t.Errorf("queued %q, want the overdue delivery %s", got, d.ID)
		}
		if _, ok := plannedOf(t, got, dropped.ID); !ok {
			t.Errorf("queued %q, want the delivery of the dropped event %s", got, dropped.ID)
		}
		// Backoff: 5 minutes after the first skip, then 10.
		for i, step := range []struct {
			after   time.Duration
			skipped int
		}{{time.Minute, 0}, {5 * time.Minute, 1}, {6 * time.Minute, 0}, {5 * time.Minute, 1}} {
			if res := run(step.after); res.Skipped != step.skipped {
				t.Errorf("run %d, %v later: skipped %d, want %d", i+2, step.after, res.Skipped, step.skipped)
			}
		}
		if got := emfSamples(t, out.String())["ReconcilerSkipped{FunctionName=}"]; !slices.Equal(got, []float64{1, 0, 1, 0, 1}) {
			t.Errorf("ReconcilerSkipped %v, want [1 0 1 0 1]", got)
		}
	})
}

// stallingStore is a store whose first query of one partition waits until
// its context is done, as a slow read would outlast the run.
type stallingStore struct {
	store.Store
	pk      string
	stalled atomic.Bool
}

func (s *stallingStore) Query(ctx context.Context, q store.Query) (store.Page, error) {
	if q.PK == s.pk && s.stalled.CompareAndSwap(false, true) {
		<-ctx.Done()
		return store.Page{}, ctx.Err()
	}
	return s.Store.Query(ctx, q)
}

// TestReconcilerReleaseStopsInTime checks that the release of parked
// deliveries keeps to its share of the run's time: the endpoints it
// finished are released, the one it did not is counted, as a deferral
// too (ReconcilerDeferralsAlarm), and released by the next run.
func TestReconcilerReleaseStopsInTime(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		q := f.deliveryQueue(t)
		parked := map[string][]string{}
		for _, ep := range []string{"sub_a", "sub_b", "sub_c"} {
			brk := store.Item{Key: keys.Breaker(f.brand.ID, ep),
				GSI3:  store.IndexKey{PK: "BREAKER", SK: f.brand.ID + "#" + ep},
				Attrs: map[string]string{"claimedAt": "1", "emptyAt": "0"},
				Data:  []byte(fmt.Sprintf(`{"brandId":%q,"type":"webhook","endpointId":%q}`, f.brand.ID, ep))}
			ops := []store.Op{store.Put(brk)}
			for i := range 2 {
				id := fmt.Sprintf("wh_%s_%d", ep, i)
				parked[ep] = append(parked[ep], id)
				ops = append(ops, store.Put(store.Item{Key: keys.Delivery(f.brand.ID, id),
					GSI3: store.IndexKey{PK: keys.ParkedPK(f.brand.ID, ep, keys.QueueShardOf(id)), SK: id}}))
			}
			if err := st.Transact(t.Context(), ops...); err != nil {
				t.Fatal(err)
			}
		}
		stalling := &stallingStore{Store: st, pk: keys.ParkedPK(f.brand.ID, "sub_b", keys.QueueShardOf("wh_sub_b_0"))}
		svc := servicetest.New(stalling, service.OnAWS(), service.WithClock(f.clock.Now))
		// The release has half of 8 s: ample for two endpoints' 70 calls,
		// the third's stall outlasts it.
		const margin = 2 * time.Second
		h, out := f.reconciler(t, svc.Webhooks, func(r *fanout.Reconciler) { r.Margin = margin })
		ctx, cancel := context.WithTimeout(lambdaContext(t, "reconciler-invocation"), margin+8*time.Second)
		defer cancel()
		res, err := h(ctx, events.EventBridgeEvent{})
		if err != nil || res.Released != 4 || res.Unfinished != 1 {
			t.Errorf("a run whose release runs out of time: %+v, %v; want the 4 deliveries of the endpoints read released, 1 endpoint unfinished", res, err)
		}
		if ctx.Err() != nil {
			t.Error("the run used up its margin")
		}
		want := func(eps ...string) []string {
			var out []string
			for _, ep := range eps {
				for _, id := range parked[ep] {
					out = append(out, messageBody(f.brand.ID, id))
				}
			}
			return slices.Sorted(slices.Values(out))
		}
		if got := slices.Sorted(slices.Values(q.messages(t))); !slices.Equal(got, want("sub_a", "sub_c")) {
			t.Errorf("queued %q, want %q", got, want("sub_a", "sub_c"))
		}
		before := len(q.messages(t))
		res, err = h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
		if err != nil || res.Released != 6 || res.Unfinished != 0 {
			t.Errorf("the next run: %+v, %v; want all 6 released (none was attempted)", res, err)
		}
		if got := q.messages(t)[before:]; !slices.Contains(got, want("sub_b")[0]) || !slices.Contains(got, want("sub_b")[1]) {
			t.Errorf("the next run queued %q, want the deliveries of sub_b among them", got)
		}
		if got := emfSamples(t, out.String())["ReconcilerDeferrals{FunctionName=}"]; !slices.Equal(got, []float64{1, 0}) {
			t.Errorf("ReconcilerDeferrals %v, want [1 0]: the run that left an endpoint says so", got)
		}
	})
}

// TestReconcilerTakesAllItFinds checks that a run re-drives all the work
// it finds, a page at a time, not one page: with pages of 2, the 5 dropped
// events and the 5 overdue deliveries are all queued, and the run says it
// left nothing (ReconcilerDeferrals 0).
func TestReconcilerTakesAllItFinds(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		f := subscribedFixture(t, st)
		var overdue, dropped []string
		for i := range 10 {
			evt := f.applied(t, fmt.Sprintf("Partner %d", i))
			if i%2 == 1 {
				dropped = append(dropped, evt.ID)
				continue
			}
			if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
				t.Fatal(err)
			}
			overdue = append(overdue, messageBody(f.brand.ID, f.deliveriesOf(t, evt.ID)[f.subs[0].ID].ID))
		}
		q := f.deliveryQueue(t)
		h, out := f.reconciler(t, f.svc.Webhooks, func(r *fanout.Reconciler) { r.Page = 2 })
		f.clock.Add(time.Hour)
		res, err := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
		if err != nil || res.Events != 5 || res.Deliveries != 5 {
			t.Fatalf("a run with pages of 2: %+v, %v; want the 5 events and the 5 deliveries re-driven", res, err)
		}
		got := q.messages(t)
		for _, body := range overdue {
			if !slices.Contains(got, body) {
				t.Errorf("queued %q, want the overdue delivery %s", got, body)
			}
		}
		for _, id := range dropped {
			if _, ok := plannedOf(t, got, id); !ok {
				t.Errorf("queued %q, want the delivery of the dropped event %s", got, id)
			}
		}
		if len(got) != 10 {
			t.Errorf("queued %d messages, want 10: each once", len(got))
		}
		if got := emfSamples(t, out.String())["ReconcilerDeferrals{FunctionName=}"]; !slices.Equal(got, []float64{0}) {
			t.Errorf("ReconcilerDeferrals %v, want [0]: nothing left", got)
		}
	})
}

// TestReconcilerSkipsAnEventItCannotRedrive checks that a dropped event
// whose fan-out fails (its item cannot be decoded) does not stop the run:
// the other dropped event is re-driven, the failing one is counted
// (ReconcilerSkipped), the run reports an error, runs in its backoff pass
// it over, and once the item is written anew a run re-drives it.
func TestReconcilerSkipsAnEventItCannotRedrive(t *testing.T) {
	forEachStore(t, func(t *testing.T, st store.Store) {
		f := subscribedFixture(t, st)
		bad, good := f.applied(t, "Runner Media"), f.applied(t, "Trail Tales")
		item, err := st.Get(t.Context(), keys.Event(bad.ID))
		if err != nil {
			t.Fatal(err)
		}
		corrupt := item
		corrupt.Data = []byte("{not json")
		if err := st.Transact(t.Context(), store.Put(corrupt)); err != nil {
			t.Fatal(err)
		}
		q := f.deliveryQueue(t)
		h, out := f.reconciler(t, f.svc.Webhooks, nil)
		run := func(after time.Duration) (fanout.ReconcilerResult, []string, error) {
			t.Helper()
			f.clock.Add(after)
			before := len(q.messages(t))
			res, err := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
			return res, q.messages(t)[before:], err
		}
		res, got, err := run(time.Hour)
		if err == nil || res.Events != 1 || res.Skipped != 1 {
			t.Fatalf("with one event's fan-out failing: %+v, %v; want the other re-driven, one skipped, an error", res, err)
		}
		if _, ok := plannedOf(t, got, good.ID); !ok || len(got) != 1 {
			t.Errorf("queued %q, want the delivery of %s alone", got, good.ID)
		}
		if res, _, _ := run(time.Minute); res.Skipped != 0 || res.Events != 1 {
			t.Errorf("a run in the backoff: %+v; want the failing event passed over", res)
		}
		if err := st.Transact(t.Context(), store.Put(item)); err != nil { // mended
			t.Fatal(err)
		}
		res, got, err = run(time.Minute)
		if _, ok := plannedOf(t, got, bad.ID); err != nil || res.Skipped != 0 || !ok {
			t.Errorf("once the event is written anew: %+v, %v, queued %q; want its delivery", res, err, got)
		}
		if got := emfSamples(t, out.String())["ReconcilerSkipped{FunctionName=}"]; !slices.Equal(got, []float64{1, 0, 0}) {
			t.Errorf("ReconcilerSkipped %v, want [1 0 0]", got)
		}
	})
}
