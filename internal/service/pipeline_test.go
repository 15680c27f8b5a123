package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// receiver is a webhook receiver on loopback that answers with the statuses
// it is given, in turn (the last one repeats), and keeps what it got. It
// answers `{"ok":false}`, or answer(n) to its request n (from 1) when set.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	answer   func(n int) string
	got      []received
	arrived  chan struct{}
}

type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	r := &receiver{statuses: statuses, arrived: make(chan struct{}, 100)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, received{header: req.Header.Clone(), body: body, at: time.Now()})
		status := r.statuses[min(len(r.got), len(r.statuses))-1]
		answer := `{"ok":false}`
		if r.answer != nil {
			answer = r.answer(len(r.got))
		}
		r.mu.Unlock()
		w.WriteHeader(status)
		w.Write([]byte(answer))
		r.arrived <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) requests() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

// pipelineFixture is a fixture whose local pipeline runs for the test.
type pipelineFixture struct {
	*fixture
	pipeline *webhooks.Pipeline
}

func newPipelineFixture(t *testing.T, st store.Store, clock *testenv.Clock) *pipelineFixture {
	f := &fixture{t: t, ctx: context.Background(), st: st, clock: clock}
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true, Now: clock.Now, Timeout: 2 * time.Second})
	f.svc = servicetest.New(st, service.WithClock(clock.Now), service.WithLoopbackReceivers(), service.WithPipeline(sender, 4, slog.New(slog.DiscardHandler)))
	b, err := f.svc.Identity.CreateBrand(f.ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	f.brandID = b.ID
	p := &pipelineFixture{fixture: f, pipeline: f.svc.Pipeline}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.pipeline.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return p
}

func (p *pipelineFixture) subscribe(url string, events []string, secret string) tally.Subscription {
	p.t.Helper()
	in := endpoints.SubscriptionInput{URL: &url, Events: events}
	if secret != "" {
		in.Secret = &secret
	}
	sub, err := p.svc.Endpoints.CreateSubscription(p.ctx, p.brandID, in)
	if err != nil {
		p.t.Fatal(err)
	}
	return sub
}

// waitFor polls the brand's deliveries until cond holds. The bound is
// generous because a run shares one DynamoDB Local with every other
// package's tests, which can stall it for seconds on a small machine.
func (p *pipelineFixture) waitFor(what string, cond func([]tally.Delivery) bool) []tally.Delivery {
	p.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ds, _, err := p.svc.Deliveries.Deliveries(p.ctx, p.brandID, endpoints.DeliveryFilter{}, records.ListParams{Limit: 100})
		if err != nil {
			p.t.Fatal(err)
		}
		if cond(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("timed out waiting for %s; deliveries: %+v", what, ds)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func attemptsAre(n int) func([]tally.Delivery) bool {
	return func(ds []tally.Delivery) bool { return len(ds) == 1 && len(ds[0].Attempts) == n }
}

func TestRetryScheduleRunsToFailure(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(start)
		p := newPipelineFixture(t, st, clock)
		rcv := newReceiver(t, 500)
		p.subscribe(rcv.srv.URL, []string{tally.EventPartnerApplied}, "whsec_0123456789abcdef")
		p.partner(false)

		p.waitFor("attempt 1", attemptsAre(1))
		for retry, wait := range webhooks.RetrySchedule {
			// Nothing happens until the wait has passed in full.
			clock.Advance(wait - time.Millisecond)
			p.pipeline.Wake()
			ds := p.waitFor("the schedule", func(ds []tally.Delivery) bool { return len(ds) == 1 })
			if n := len(ds[0].Attempts); n != retry+1 {
				t.Fatalf("%d attempts %v before retry %d was due, want %d", n, wait-time.Millisecond, retry+1, retry+1)
			}
			clock.Advance(time.Millisecond)
			p.pipeline.Wake()
			p.waitFor("the retry", attemptsAre(retry+2))
		}
		d := p.waitFor("failure", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliveryFailed })[0]
		if len(d.Attempts) != webhooks.MaxAttempts || d.NextAttemptAt != nil {
			t.Errorf("failed delivery: %d attempts, next %v; want %d and none", len(d.Attempts), d.NextAttemptAt, webhooks.MaxAttempts)
		}
		for i := 1; i < len(d.Attempts); i++ {
			if gap := d.Attempts[i].At.Sub(d.Attempts[i-1].At.Time); gap != webhooks.RetrySchedule[i-1] {
				t.Errorf("gap before attempt %d = %v, want %v", i+1, gap, webhooks.RetrySchedule[i-1])
			}
			if d.Attempts[i].StatusCode != 500 || d.Attempts[i].Response != `{"ok":false}` {
				t.Errorf("attempt %d recorded %+v", i+1, d.Attempts[i])
			}
		}
		// Every attempt was the same delivery of the same event, freshly signed.
		reqs := rcv.requests()
		if len(reqs) != webhooks.MaxAttempts {
			t.Fatalf("receiver got %d requests, want %d", len(reqs), webhooks.MaxAttempts)
		}
		signatures := map[string]bool{}
		for _, r := range reqs {
			if r.header.Get(webhook.WebhookIDHeader) != d.ID || r.header.Get(webhook.EventHeader) != tally.EventPartnerApplied {
				t.Errorf("headers %v, want webhook id %s", r.header, d.ID)
			}
			var env tally.Event
			if err := json.Unmarshal(r.body, &env); err != nil || env.ID != d.EventID {
				t.Errorf("envelope %s, want id %s", r.body, d.EventID)
			}
			signatures[r.header.Get(webhook.SignatureHeader)] = true
		}
		if len(signatures) != webhooks.MaxAttempts {
			t.Errorf("%d distinct signatures over %d attempts, want each freshly signed", len(signatures), webhooks.MaxAttempts)
		}
		// Nothing more is sent once it failed.
		clock.Advance(24 * time.Hour)
		p.pipeline.Wake()
		if _, err := p.svc.Deliveries.RetryDelivery(p.ctx, p.brandID, d.ID); err != nil {
			t.Fatal(err)
		}
		p.waitFor("the manual retry", attemptsAre(webhooks.MaxAttempts+1))
	})
}

// The log shows each attempt's answer as the receiver sent it, long ones
// compressed against the endpoint's earlier answers included.
func TestDeliveryLogShowsAnswersAsSent(t *testing.T) {
	page := func(n int) string {
		var b strings.Builder
		b.WriteString("<!DOCTYPE html>\n<html><head><title>Not yet & not here</title></head><body><ul>\n")
		for i := 0; b.Len() < 4096; i++ {
			fmt.Fprintf(&b, "<li data-id=\"%d\">item %d of request %d</li>\n", i*31%997, i, n)
		}
		return b.String()[:4096]
	}
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(start)
		p := newPipelineFixture(t, st, clock)
		rcv := newReceiver(t, 500, 500, 200)
		rcv.answer = page
		p.subscribe(rcv.srv.URL, []string{tally.EventPartnerApplied}, "whsec_0123456789abcdef")
		p.partner(false)

		p.waitFor("attempt 1", attemptsAre(1))
		for retry, wait := range webhooks.RetrySchedule[:2] {
			clock.Advance(wait)
			p.pipeline.Wake()
			p.waitFor("the retry", attemptsAre(retry+2))
		}
		d := p.waitFor("success", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded })[0]
		shown, err := p.svc.Deliveries.Delivery(p.ctx, p.brandID, d.ID)
		if err != nil {
			t.Fatal(err)
		}
		// Compressed against the endpoint's dictionary: its first answer.
		dicts, err := st.Query(p.ctx, store.Query{PK: keys.AnswerDictionary(p.brandID, d.SubscriptionID, 0).PK})
		if err != nil || len(dicts.Items) != 1 || string(dicts.Items[0].Data) != page(1) {
			t.Errorf("the endpoint's dictionaries: %d, %v; want its first answer", len(dicts.Items), err)
		}
		for _, got := range []tally.Delivery{d, shown} {
			if len(got.Attempts) != 3 {
				t.Fatalf("%d attempts, want 3", len(got.Attempts))
			}
			for i, a := range got.Attempts {
				if a.Response != page(i+1) {
					t.Errorf("attempt %d's answer reads %d bytes %.60q…, want %d bytes %.60q…", i+1, len(a.Response), a.Response, len(page(i+1)), page(i+1))
				}
			}
		}
	})
}

func TestRetriesFollowTheScheduleInRealTime(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	svc := servicetest.New(testenv.Bolt(t), service.WithLoopbackReceivers(), // the wall clock
		service.WithPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), 4, slog.New(slog.DiscardHandler)))
	go svc.Pipeline.Run(ctx)
	brand, err := svc.Identity.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, 503, 503, 200)
	if _, err := svc.Endpoints.CreateSubscription(ctx, brand.ID, endpoints.SubscriptionInput{URL: &rcv.srv.URL, Events: []string{tally.EventPartnerApplied}}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Partners.Apply(ctx, brand.ID, partners.ApplicationInput{Name: ptr("Pat"), Email: ptr("pat@example.com")}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		select {
		case <-rcv.arrived:
		case <-time.After(15 * time.Second):
			t.Fatalf("receiver got %d requests, want 3", len(rcv.requests()))
		}
	}
	reqs := rcv.requests()
	for i, want := range []time.Duration{time.Second, 5 * time.Second} {
		if gap := reqs[i+1].at.Sub(reqs[i].at); gap < want*8/10 || gap > want*12/10 {
			t.Errorf("gap before attempt %d = %v, want %v ± 20%%", i+2, gap, want)
		}
	}
}

func TestDeliveriesGoOnlyWhereSubscribed(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(start)
		p := newPipelineFixture(t, st, clock)
		convRcv, partnerRcv, other := newReceiver(t, 200), newReceiver(t, 500), newReceiver(t, 200)
		p.subscribe(convRcv.srv.URL, []string{tally.EventConversionCreated}, "")
		flaky := p.subscribe(partnerRcv.srv.URL, []string{tally.EventPartnerApplied, tally.EventPartnerApproved}, "")
		// Another brand's subscription to everything gets none of this brand's events.
		b2, _ := p.svc.Identity.CreateBrand(p.ctx, "Other")
		if _, err := p.svc.Endpoints.CreateSubscription(p.ctx, b2.ID, endpoints.SubscriptionInput{URL: &other.srv.URL, Events: []string{tally.EventConversionCreated, tally.EventPartnerApplied}}); err != nil {
			t.Fatal(err)
		}

		partner := p.partner(true) // partner.applied, partner.approved
		offer := p.offer(tally.ApprovalAuto, 0, tally.Caps{})
		p.convert(offer.ID, partner.ID, conversions.ConversionInput{})
		ds := p.waitFor("four deliveries", func(ds []tally.Delivery) bool {
			settled := 0
			for _, d := range ds {
				if len(d.Attempts) > 0 {
					settled++
				}
			}
			return settled == 3
		})
		byEvent := map[string]int{}
		for _, d := range ds {
			byEvent[d.Event]++
		}
		if byEvent[tally.EventConversionCreated] != 1 || byEvent[tally.EventPartnerApplied] != 1 || byEvent[tally.EventPartnerApproved] != 1 || len(ds) != 3 {
			t.Errorf("deliveries by event = %v, want one of each subscribed event", byEvent)
		}
		if n := len(convRcv.requests()); n != 1 {
			t.Errorf("conversion receiver got %d requests, want 1", n)
		}
		// Fanning the same event out again creates nothing new.
		evts := p.events(tally.EventConversionCreated)
		refs, err := p.svc.Webhooks.FanOut(p.ctx, evts[0].ID)
		if err != nil || len(refs) != 0 {
			t.Errorf("repeated fan-out: %v, %v; want nothing pending", refs, err)
		}
		// The flaky receiver's subscription is deleted: its pending
		// deliveries fail without another request.
		before := len(partnerRcv.requests())
		if _, err := p.svc.Endpoints.DeleteSubscription(p.ctx, p.brandID, flaky.ID); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		p.pipeline.Wake()
		p.waitFor("the deleted subscription's deliveries to fail", func(ds []tally.Delivery) bool {
			for _, d := range ds {
				if d.SubscriptionID == flaky.ID && d.Status != tally.DeliveryFailed {
					return false
				}
			}
			return true
		})
		if after := len(partnerRcv.requests()); after != before {
			t.Errorf("deleted subscription got %d more requests", after-before)
		}
		if n := len(other.requests()); n != 0 {
			t.Errorf("another brand's receiver got %d requests", n)
		}
		// A test event goes to the one subscription asked for.
		test := p.subscribe(other.srv.URL, []string{tally.EventCapReached}, "")
		if _, err := p.svc.Endpoints.SendTestEvent(p.ctx, p.brandID, test.ID); err != nil {
			t.Fatal(err)
		}
		<-other.arrived
		if got := other.requests()[0].header.Get(webhook.EventHeader); got != tally.EventWebhookTest {
			t.Errorf("test event header %q", got)
		}
	})
}

// refusingSender stands in for a receiver that always answers 500; the real
// sender is tested in internal/delivery.
type refusingSender struct{ now func() time.Time }

func (s refusingSender) Send(context.Context, outgoing.Request) tally.Attempt {
	return tally.Attempt{At: tally.NewTime(s.now()), StatusCode: 500}
}

func TestManualRetryThatCannotBeQueuedStaysFailed(t *testing.T) {
	st := testenv.Bolt(t)
	clock := testenv.NewClock(start)
	queueDown := errors.New("queue unavailable")
	var queued []endpoints.DeliveryRef
	requeue := func(_ context.Context, ref endpoints.DeliveryRef) error {
		if queueDown != nil {
			return queueDown
		}
		queued = append(queued, ref)
		return nil
	}
	f, ref := oneDelivery(t, st, clock, service.WithRequeue(requeue))
	refs := []endpoints.DeliveryRef{ref}
	for n := 1; n <= webhooks.MaxAttempts; n++ {
		if _, err := f.svc.Webhooks.Attempt(f.ctx, refs[0], n, refusingSender{clock.Now}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.svc.Deliveries.RetryDelivery(f.ctx, f.brandID, refs[0].DeliveryID); !errors.Is(err, queueDown) {
		t.Fatalf("retry with the queue down: %v, want the queue's error", err)
	}
	if d, _ := f.svc.Deliveries.Delivery(f.ctx, f.brandID, refs[0].DeliveryID); d.Status != tally.DeliveryFailed || d.NextAttemptAt != nil {
		t.Errorf("after a retry that could not be queued: %s, next %v; want failed, as before", d.Status, d.NextAttemptAt)
	}
	queueDown = nil
	if d, err := f.svc.Deliveries.RetryDelivery(f.ctx, f.brandID, refs[0].DeliveryID); err != nil || d.Status != tally.DeliveryPending || len(queued) != 1 {
		t.Errorf("retry with the queue up: %s, %v, %d queued; want pending and one message", d.Status, err, len(queued))
	}
}
