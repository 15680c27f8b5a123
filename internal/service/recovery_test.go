package service_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
)

// expiries records the TTL of every delivery write.
type expiries struct {
	store.Store
	mu  sync.Mutex
	ttl map[string]int64 // by sort key (the delivery id)
}

func (e *expiries) Transact(ctx context.Context, ops ...store.Op) error {
	err := e.Store.Transact(ctx, ops...)
	if err == nil {
		e.mu.Lock()
		for _, op := range ops {
			if op.Kind == store.OpPut && strings.HasPrefix(op.Item.SK, "wh_") {
				e.ttl[op.Item.SK] = op.Item.ExpiresAt
			}
		}
		e.mu.Unlock()
	}
	return err
}

func (e *expiries) of(id string) time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return time.Unix(e.ttl[id], 0).UTC()
}

// A delivery and its attempts expire a retention after its last change:
// 30 days by default, or what the deployment sets.
func TestDeliveriesExpire(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []service.Option
		keep time.Duration
	}{
		{"default", nil, 30 * 24 * time.Hour},
		{"configured", []service.Option{service.WithDeliveryRetention(7 * 24 * time.Hour)}, 7 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
				rec := &expiries{Store: st, ttl: map[string]int64{}}
				clock := testenv.NewClock(start)
				f, ref := oneDelivery(t, rec, clock, tc.opts...)
				refs, id := []endpoints.DeliveryRef{ref}, ref.DeliveryID
				if got := rec.of(id); !got.Equal(start.Add(tc.keep)) {
					t.Errorf("a new delivery expires at %v, want %v", got, start.Add(tc.keep))
				}
				clock.Advance(time.Hour)
				for n := 1; n <= webhooks.MaxAttempts; n++ {
					if _, err := f.svc.Webhooks.Attempt(f.ctx, refs[0], n, refusingSender{clock.Now}); err != nil {
						t.Fatal(err)
					}
				}
				if got, want := rec.of(id), start.Add(time.Hour+tc.keep); !got.Equal(want) {
					t.Errorf("after its last attempt it expires at %v, want %v", got, want)
				}
			})
		})
	}
}

// oneDelivery makes a brand on st with a subscription to partner.applied
// (at an https URL, nothing is sent there), has a partner apply, and fans
// the event out: one pending delivery.
func oneDelivery(t *testing.T, st store.Store, clock *testenv.Clock, opts ...service.Option) (*fixture, endpoints.DeliveryRef) {
	t.Helper()
	f := &fixture{t: t, ctx: context.Background(), st: st, clock: clock,
		svc: servicetest.New(st, append([]service.Option{service.WithClock(clock.Now)}, opts...)...)}
	b, err := f.svc.Identity.CreateBrand(f.ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	f.brandID = b.ID
	url := "https://hooks.example.com/x"
	if _, err := f.svc.Endpoints.CreateSubscription(f.ctx, f.brandID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}}); err != nil {
		t.Fatal(err)
	}
	f.partner(false)
	refs, err := f.svc.Webhooks.FanOut(f.ctx, f.events(tally.EventPartnerApplied)[0].ID)
	if err != nil || len(refs) != 1 {
		t.Fatalf("fan-out: %v, %v", refs, err)
	}
	return f, refs[0]
}

// Overdue lists the events still in the outbox and the pending deliveries
// whose next attempt was due, both before the cutoff, oldest first and up
// to the limit; AbandonDelivery fails a pending delivery once.
func TestOverdueAndAbandon(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		url := "https://hooks.example.com/x"
		if _, err := f.svc.Endpoints.CreateSubscription(f.ctx, f.brandID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}}); err != nil {
			t.Fatal(err)
		}
		var fanned []endpoints.DeliveryRef
		for range 3 {
			f.partner(false)
			refs, err := f.svc.Webhooks.FanOut(f.ctx, f.events(tally.EventPartnerApplied)[0].ID)
			if err != nil || len(refs) != 1 {
				t.Fatalf("fan-out: %v, %v", refs, err)
			}
			fanned = append(fanned, refs[0])
			f.clock.Advance(time.Minute)
		}
		f.partner(false) // its event stays in the outbox
		outboxed := f.events(tally.EventPartnerApplied)[0].ID
		all := f.events("")

		due, err := f.svc.Webhooks.Overdue(f.ctx, start.Add(-time.Second), 10)
		evts, refs := due.Events, due.Deliveries
		if err != nil || len(evts) != 0 || len(refs) != 0 {
			t.Errorf("before anything was due: %v, %v, %v", evts, refs, err)
		}
		due, err = f.svc.Webhooks.Overdue(f.ctx, f.clock.Now(), 10)
		evts, refs = due.Events, due.Deliveries
		if err != nil || !slices.Equal(refs, fanned) || !slices.Contains(evts, outboxed) {
			t.Errorf("overdue: events %v, deliveries %v (%v); want %s among the events and %v", evts, refs, err, outboxed, fanned)
		}
		// Every event of the brand but the three fanned out is still in
		// the outbox (the partner.approved ones too: nothing fanned them out).
		if len(evts) != len(all)-3 {
			t.Errorf("%d events in the outbox, want %d", len(evts), len(all)-3)
		}
		if due, _ = f.svc.Webhooks.Overdue(f.ctx, f.clock.Now(), 2); !slices.Equal(due.Deliveries, fanned[:2]) {
			t.Errorf("limit 2: %v, want the two oldest %v", due.Deliveries, fanned[:2])
		}

		res, err := f.svc.Webhooks.AbandonDelivery(f.ctx, fanned[0])
		if err != nil || res.Status != tally.DeliveryFailed {
			t.Fatalf("abandon: %+v, %v", res, err)
		}
		d, _ := f.svc.Deliveries.Delivery(f.ctx, f.brandID, fanned[0].DeliveryID)
		if d.Status != tally.DeliveryFailed || d.NextAttemptAt != nil || len(d.Attempts) != 0 {
			t.Errorf("abandoned delivery %+v, want failed without attempts", d)
		}
		if due, _ = f.svc.Webhooks.Overdue(f.ctx, f.clock.Now(), 10); !slices.Equal(due.Deliveries, fanned[1:]) {
			t.Errorf("after the abandon: %v, want %v", due.Deliveries, fanned[1:])
		}
		if res, err := f.svc.Webhooks.AbandonDelivery(f.ctx, fanned[0]); err != nil || res.Status != tally.DeliveryFailed {
			t.Errorf("abandon again: %+v, %v", res, err)
		}
		if _, err := f.svc.Deliveries.RetryDelivery(f.ctx, f.brandID, fanned[0].DeliveryID); err != nil {
			t.Errorf("a manual retry of the abandoned delivery: %v", err)
		}
	})
}

// A conversion decided or reversed after its record keeps what says the
// fan-out makes its conversion.created: when the stream batch that held
// its insert is given up, the reconciler still finds it in the batch's
// time span and dispatches it again.
func TestDecidedConversionsStayFoundForTheReconciler(t *testing.T) {
	st := testenv.DynamoDB(t)
	f := newFixture(t, st)
	svc := servicetest.New(st, service.WithClock(f.clock.Now), service.WithStreamConversions())
	manual, auto, partner := f.offer(tally.ApprovalManual, 0, tally.Caps{}), f.offer(tally.ApprovalAuto, 0, tally.Caps{}), f.partner(true)
	record := func(offerID, txn string) tally.Conversion {
		t.Helper()
		c, _, err := svc.Conversions.RecordConversion(f.ctx, f.brandID, conversions.ConversionInput{OfferID: &offerID, PartnerID: &partner.ID, ExternalTxnID: ptr(txn)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	approved, rejected, reversed := record(manual.ID, "a"), record(manual.ID, "b"), record(auto.ID, "c")
	f.clock.Advance(time.Minute)
	if _, err := svc.Conversions.ApproveConversion(f.ctx, f.brandID, approved.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Conversions.RejectConversion(f.ctx, f.brandID, rejected.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Conversions.ReverseConversion(f.ctx, f.brandID, reversed.ID, conversions.ReversalInput{Reason: ptr(tally.ReversalRefund)}); err != nil {
		t.Fatal(err)
	}
	var found []string
	err := svc.Webhooks.StreamConversions(f.ctx, start.Add(-time.Minute), start.Add(time.Minute), webhooks.StreamPosition{}, func(items []store.Item, _ webhooks.StreamPosition) bool {
		for _, it := range items {
			found = append(found, it.SK)
		}
		return true
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(found)
	want := []string{approved.ID, rejected.ID, reversed.ID}
	slices.Sort(want)
	if !slices.Equal(found, want) {
		t.Errorf("the reconciler finds %v in the span of their records, want the decided and reversed %v", found, want)
	}
}

// StreamConversions hands every page it reads to its caller, none marked
// too, with the position past it: a reconciler whose time is up stops
// between any two queries, across brands without conversions in the span,
// and the next run goes on from there.
func TestStreamConversionsStopsBetweenAnyTwoQueries(t *testing.T) {
	st := testenv.DynamoDB(t)
	f := newFixture(t, st)
	svc := servicetest.New(st, service.WithClock(f.clock.Now), service.WithStreamConversions())
	for _, name := range []string{"Beta", "Gamma"} {
		if _, err := svc.Identity.CreateBrand(f.ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	offer, partner := f.offer(tally.ApprovalAuto, 0, tally.Caps{}), f.partner(true)
	c, _, err := svc.Conversions.RecordConversion(f.ctx, f.brandID, conversions.ConversionInput{OfferID: &offer.ID, PartnerID: &partner.ID})
	if err != nil {
		t.Fatal(err)
	}
	from, to := start.Add(-time.Minute), start.Add(time.Minute)
	var pages []webhooks.StreamPosition
	var found []string
	read := func(at webhooks.StreamPosition, stopAfter int) {
		t.Helper()
		err := svc.Webhooks.StreamConversions(f.ctx, from, to, at, func(items []store.Item, next webhooks.StreamPosition) bool {
			pages = append(pages, next)
			for _, it := range items {
				found = append(found, it.SK)
			}
			return len(pages) != stopAfter
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	read(webhooks.StreamPosition{}, 0)
	all := slices.Clone(pages)
	if len(all) < 3*keys.Shards || !slices.Equal(found, []string{c.ID}) {
		t.Fatalf("a whole read handed over %d pages and %v, want every shard of the 3 brands and %s", len(all), found, c.ID)
	}
	// Stopped after the fifth page, then resumed from its position: the
	// pages after it, and the conversion once.
	pages, found = nil, nil
	read(webhooks.StreamPosition{}, 5)
	stoppedAt := pages[4]
	pages = nil
	read(stoppedAt, 0)
	if first := len(found); first > 1 || len(pages) < len(all)-5 {
		t.Errorf("resumed at %+v: %d pages and %v, want the %d after it and the conversion once", stoppedAt, len(pages), found, len(all)-5)
	}
}
