package sfntest_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// While an endpoint is down, its deliveries do not each start a retry
// execution: after the first failures one delivery probes the endpoint and
// the others are parked; when it is back, the reconciler releases them and
// every parked delivery is made. DynamoDB Local, fauxqs and local-sfn, with
// 5 s waits so that the first batch's own schedules (6 waits) usually
// outlive the outage and are made too.
func TestBreakerParksDeliveriesOfADownEndpoint(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	const n = 30
	var up atomic.Bool
	p := newPipelineWaiting(t, 5*time.Second, 180*time.Second, func(int) int {
		if up.Load() {
			return http.StatusOK
		}
		return http.StatusServiceUnavailable
	})
	p.conversions(t, n)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out.BatchItemFailures)
	}
	down := time.Now()
	if got := p.deliverAll(t); got != n {
		t.Fatalf("the deliver function took %d messages, want %d", got, n)
	}
	// The first batch of 10 is attempted at once, while the endpoint still
	// looks healthy: each of those runs its own schedule; then one probe.
	started := p.workflow.Names()
	if len(started) > 11 {
		t.Errorf("%d deliveries to a down endpoint started %d executions, want at most 11", n, len(started))
	}
	ds := p.allDeliveries(t)
	parked := map[string]bool{}
	for _, d := range ds {
		if d.Status == tally.DeliveryPending && len(d.Attempts) == 0 {
			parked[d.ID] = true
		}
	}
	if len(parked) < n-11 {
		t.Errorf("%d deliveries wait without an attempt, want at least %d", len(parked), n-11)
	}

	up.Store(true)
	outage := time.Since(down)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		p.reconcile(t)
		p.deliverAll(t)
		ds = p.allDeliveries(t)
		// Every parked delivery is made. One with an execution of its own
		// may instead have run its schedule out while the endpoint was
		// down, on a machine slow enough to stretch six 5 s waits past
		// the outage: then it failed, as it should.
		done := 0
		for _, d := range ds {
			if d.Status == tally.DeliverySucceeded || d.Status == tally.DeliveryFailed && !parked[d.ID] {
				done++
			}
		}
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d deliveries settled after the endpoint came back (down for %v): %+v", done, n, outage.Round(time.Millisecond), ds)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Each delivery reached the receiver with a 2xx once.
	ok := map[string]int{}
	for _, r := range p.rcv.requests() {
		if r.status == http.StatusOK {
			ok[r.header.Get(webhook.WebhookIDHeader)]++
		}
	}
	for _, d := range ds {
		if want := map[bool]int{true: 1}[d.Status == tally.DeliverySucceeded]; ok[d.ID] != want {
			t.Errorf("delivery %s (%s) was accepted %d times, want %d", d.ID, d.Status, ok[d.ID], want)
		}
	}
	if res := p.reconcile(t); res.Released != 0 || res.Deliveries != 0 || res.Circuits != 1 {
		t.Errorf("a further reconciler run did %+v, want nothing, with the endpoint's wait list read", res)
	}
	// Once nothing has waited for 10 minutes, the wait list is no longer
	// read (the endpoint can only get parked deliveries after a new probe).
	if res := p.reconcileAfter(t, time.Hour); res.Circuits != 0 {
		t.Errorf("an hour later the reconciler read %d wait lists, want none", res.Circuits)
	}
	if len(p.workflow.Names()) > 12 {
		t.Errorf("%d executions in all, want at most 12 (the first batch, a probe, perhaps a second probe)", len(p.workflow.Names()))
	}
}

// An endpoint that stays down: the probe fails its whole schedule, and the
// deliveries that waited behind it all along are failed by the reconciler,
// as their own schedules would have failed them, without a request each.
// Nothing stays pending.
func TestBreakerFailsWhatWaitedOutAFailedProbe(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	const n = 30
	p := newPipeline(t, 180*time.Second, func(int) int { return http.StatusServiceUnavailable })
	p.conversions(t, n)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out.BatchItemFailures)
	}
	p.deliverAll(t)
	started := p.workflow.Names()
	if len(started) > 11 {
		t.Errorf("%d deliveries to a down endpoint started %d executions, want at most 11", n, len(started))
	}
	for _, name := range started {
		if res := p.workflow.Wait(t, name); res.Status != sfntest.StatusSucceeded {
			t.Fatalf("execution %s ended %v", name, res)
		}
	}
	res := p.reconcile(t)
	if res.Failed != n-len(started) {
		t.Errorf("the reconciler failed %d parked deliveries, want %d (every one but those with executions)", res.Failed, n-len(started))
	}
	p.deliverAll(t)
	for _, d := range p.allDeliveries(t) {
		if d.Status != tally.DeliveryFailed {
			t.Errorf("delivery %s is %s with %d attempts, want failed", d.ID, d.Status, len(d.Attempts))
		}
	}
	if got, most := len(p.rcv.requests()), len(started)*webhooks.MaxAttempts; got > most {
		t.Errorf("the receiver got %d requests, want at most %d (the executions' attempts)", got, most)
	}
}

// A test event is sent whatever the endpoint's circuit or health: whoever
// sends one is looking at the endpoint now.
func TestBreakerSendsTestEvents(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	// Waits of 2 s: the probe is still under way when the test event comes.
	p := newPipelineWaiting(t, 2*time.Second, 180*time.Second, func(int) int { return http.StatusServiceUnavailable })
	p.conversions(t, 15)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out.BatchItemFailures)
	}
	p.deliverAll(t) // the circuit opens; a probe; the rest parked
	test := func(what string) {
		t.Helper()
		evt := p.event(t)
		batch := p.streamBatch(t)
		if out := p.fanout(t, p.send, batch[len(batch)-1:]); len(out.BatchItemFailures) > 0 {
			t.Fatalf("fanout: %+v", out.BatchItemFailures)
		}
		p.deliverAll(t)
		ds, _, err := p.svc.Deliveries.Deliveries(t.Context(), p.brand.ID, endpoints.DeliveryFilter{EventID: evt}, records.ListParams{Limit: 10})
		if err != nil || len(ds) != 1 || len(ds[0].Attempts) != 1 {
			t.Fatalf("%s: the test event's delivery: %+v, %v; want one attempt made", what, ds, err)
		}
		got := 0
		for _, r := range p.rcv.requests() {
			if r.header.Get(webhook.WebhookIDHeader) == ds[0].ID {
				got++
			}
		}
		if got != 1 {
			t.Errorf("%s: the receiver got %d requests for the test event, want 1", what, got)
		}
	}
	test("circuit open")
	p.disableSubscription(t)
	test("endpoint disabled")
}

// conversions records n conversions, each a conversion.created event.
func (p *pipeline) conversions(t *testing.T, n int) {
	t.Helper()
	_, offerID, partnerID := p.conversionSetup(t)
	for i := range n {
		txn := fmt.Sprint("order-", i)
		if _, _, err := p.svc.Conversions.RecordConversion(t.Context(), p.brand.ID, conversions.ConversionInput{OfferID: &offerID, PartnerID: &partnerID, ExternalTxnID: &txn}); err != nil {
			t.Fatal(err)
		}
	}
}

// allDeliveries is every delivery of the brand.
func (p *pipeline) allDeliveries(t *testing.T) []tally.Delivery {
	t.Helper()
	ds, _, err := p.svc.Deliveries.Deliveries(t.Context(), p.brand.ID, endpoints.DeliveryFilter{}, records.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}
