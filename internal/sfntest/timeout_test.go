package sfntest_test

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// These tests stop a function at its Lambda timeout in the middle of its
// work: a store call after the cut waits for the invocation's deadline and
// fails, as every call in flight does when Lambda stops the function, and
// the handler's answer is thrown away, as Lambda throws it away. What the
// invocation did before the cut stays done; the retry (the stream's, the
// next scheduled run) must finish the rest, with nothing lost and nothing
// delivered twice.

// cuttingStore is the table with a cut: once cut says so for a call, that
// call and every later one wait until their context is done.
type cuttingStore struct {
	*dynamo.Store
	cut     func(kind string, key store.Key) bool
	stopped atomic.Bool
	blocked atomic.Int64
}

func (s *cuttingStore) wait(ctx context.Context, kind string, key store.Key) error {
	if s.stopped.Load() || s.cut(kind, key) {
		s.stopped.Store(true)
		s.blocked.Add(1)
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (s *cuttingStore) Get(ctx context.Context, key store.Key) (store.Item, error) {
	if err := s.wait(ctx, "get", key); err != nil {
		return store.Item{}, err
	}
	return s.Store.Get(ctx, key)
}

func (s *cuttingStore) Query(ctx context.Context, q store.Query) (store.Page, error) {
	if err := s.wait(ctx, "query", store.Key{PK: q.PK}); err != nil {
		return store.Page{}, err
	}
	return s.Store.Query(ctx, q)
}

func (s *cuttingStore) Transact(ctx context.Context, ops ...store.Op) error {
	if err := s.wait(ctx, "write", ops[0].Target()); err != nil {
		return err
	}
	return s.Store.Transact(ctx, ops...)
}

func (s *cuttingStore) Update(ctx context.Context, op store.Op) (store.Item, error) {
	if err := s.wait(ctx, "write", op.Target()); err != nil {
		return store.Item{}, err
	}
	return s.Store.Update(ctx, op)
}

// after is a cut after n calls of kind.
func after(n int64, kind string) func(string, store.Key) bool {
	var seen atomic.Int64
	return func(k string, _ store.Key) bool { return k == kind && seen.Add(1) > n }
}

// TestFanoutTimeoutMidBatch stops the fan-out at its timeout half-way
// through a stream batch of new conversions, and retries the whole batch,
// as the event source mapping does after a function error: each
// conversion's deliveries (carried in their messages with one
// subscription; written by the fan-out with five) are delivered once
// each, none lost, though the cut invocation wrote some deliveries.
func TestFanoutTimeoutMidBatch(t *testing.T) {
	t.Parallel()
	for _, subs := range []int{1, 5} {
		t.Run(map[int]string{1: "carried", 5: "written"}[subs], func(t *testing.T) {
			t.Parallel()
			p := newConversionPipeline(t)
			for range subs - 1 {
				p.subscribe(t, p.rcv.URL, secret, tally.EventConversionCreated)
			}
			var ids []string
			for i := range 6 {
				ids = append(ids, p.convert(t, "order-"+string(rune('a'+i))))
			}
			batch := p.streamBatch(t)
			if len(batch) < len(ids) {
				t.Fatalf("the stream has %d inserts, want the %d conversions' at least", len(batch), len(ids))
			}
			// With five subscriptions the fan-out writes each conversion's
			// deliveries: half of them go through. With one it writes
			// nothing (they are carried): its reads are cut, the batch's
			// read of the partner's postback.
			cutAt := after(int64(len(ids)*subs/2), "write")
			if subs == 1 {
				cutAt = after(0, "get")
			}
			cut := &cuttingStore{Store: dynamo.New(p.client, p.table), cut: cutAt}
			ctx, cancel := context.WithTimeout(lambdaContext(t.Context(), "fanout"), 3*time.Second)
			defer cancel()
			fanout.Handler(servicetest.New(cut, service.OnAWS()).Webhooks, p.send, p.queue.URL, p.log)(ctx, roundTrip(t, events.DynamoDBEvent{Records: batch}))
			if cut.blocked.Load() == 0 {
				t.Fatal("the invocation was not cut")
			}

			if out := p.fanout(t, p.send, batch); len(out.BatchItemFailures) > 0 {
				t.Fatalf("the retried batch: %+v", out)
			}
			p.deliverAll(t)
			p.deliveredOnce(t, subs, ids...)
		})
	}
}

// deliveredOnce checks that each conversion's conversion.created reached
// the receiver once per subscription, each delivery succeeded at its first
// attempt, and a further reconciler run finds nothing.
func (p *conversionPipeline) deliveredOnce(t *testing.T, subs int, conversionIDs ...string) {
	t.Helper()
	sent := map[string]int{} // by delivery id
	var bodies strings.Builder
	for _, r := range p.rcv.requests() {
		sent[r.header.Get("X-Tally-Webhook-Id")]++
		bodies.Write(r.body)
	}
	ds, _, err := p.svc.Deliveries.Deliveries(t.Context(), p.brand.ID, endpoints.DeliveryFilter{}, records.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if want := subs * len(conversionIDs); len(ds) != want || len(sent) != want {
		t.Errorf("%d deliveries, %d delivered; want %d: one per conversion and subscription", len(ds), len(sent), want)
	}
	for _, d := range ds {
		if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 || sent[d.ID] != 1 {
			t.Errorf("delivery %s: %s after %d attempts, sent %d times; want succeeded, sent once", d.ID, d.Status, len(d.Attempts), sent[d.ID])
		}
	}
	for _, id := range conversionIDs {
		if !strings.Contains(bodies.String(), id) {
			t.Errorf("conversion %s was not delivered", id)
		}
	}
	if res := p.reconcile(t); res.Events != 0 || res.Deliveries != 0 {
		t.Errorf("a further run re-drove %+v, want nothing", res)
	}
}

// TestReconcileTimeoutMidRun stops a reconciler run at its timeout in the
// middle of its second page of dropped events (the first page's messages
// are queued): the next run re-drives the rest (and the first page again:
// those events are in the outbox until attempt 1), and each event is
// delivered once.
func TestReconcileTimeoutMidRun(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, ok200)
	var evts []string
	for range 12 {
		evts = append(evts, p.event(t))
	}
	// Dispatch reads each event first: the seventh read is cut, in the
	// second page of four.
	var reads atomic.Int64
	cut := &cuttingStore{Store: dynamo.New(p.client, p.table), cut: func(kind string, key store.Key) bool {
		return kind == "get" && strings.HasPrefix(key.PK, "EVT#") && reads.Add(1) > 6
	}}
	later := func() time.Time { return time.Now().Add(fanout.DefaultReconciler.Grace + time.Minute) }
	r := fanout.DefaultReconciler
	var metrics bytes.Buffer
	r.Page, r.Workers, r.Metrics = 4, 2, emf.New(&metrics)
	ctx, cancel := context.WithTimeout(lambdaContext(t.Context(), "reconciler"), 3*time.Second)
	defer cancel()
	res, _ := r.Handler(servicetest.New(cut, service.OnAWS(), service.WithClock(later)).Webhooks, p.send, p.queue.URL, p.log)(ctx, events.EventBridgeEvent{})
	if cut.blocked.Load() == 0 || res.Events < 4 || res.Events >= len(evts) {
		t.Fatalf("the cut run: %+v, %d calls cut; want it cut after its first page", res, cut.blocked.Load())
	}
	// Lambda would not let it say so; a run whose margin is up does.
	if !res.OutOfTime || !strings.Contains(metrics.String(), `"ReconcilerDeferrals":1`) {
		t.Errorf("the cut run: %+v, metrics %s; want it out of time, and a deferral counted", res, metrics.String())
	}

	if res := p.reconcile(t); res.Events != len(evts) {
		t.Fatalf("the next run: %+v, want all %d re-driven: none was attempted yet", res, len(evts))
	}
	p.deliverAll(t)
	p.recovered(t, evts...)
}
