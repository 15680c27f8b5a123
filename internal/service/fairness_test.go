package service_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/webhook"
)

// One brand's 50 webhook receivers (the most a brand may have) hang: every
// attempt waits until the test lets it go, as a receiver running into the
// 10 s limit would, only longer. The brand's other endpoint (its partner's
// postback) and another brand's receiver are served while every hanging
// attempt is still under way, and each hanging endpoint holds one attempt.
// The pipeline has 64 workers; before the fair scheduler the noisy brand's
// fan-outs and attempts took all of them and the other brand's events
// waited.
func TestHangingEndpointsDelayNoOneElse(t *testing.T) {
	const hangingEndpoints, noisyConversions, workers = 50, 70, 64
	release := make(chan struct{})
	var (
		hung   atomic.Int64
		mu     sync.Mutex
		byPath = map[string]int{} // attempts under way per hanging endpoint
	)
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hung.Add(1)
		mu.Lock()
		byPath[r.URL.Path]++
		mu.Unlock()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)

	st := testenv.Bolt(t)
	clock := testenv.NewClock(start)
	f := &fixture{t: t, ctx: context.Background(), st: st, clock: clock}
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true, Now: clock.Now, Timeout: time.Hour})
	f.svc = servicetest.New(st, service.WithClock(clock.Now), service.WithLoopbackReceivers(), service.WithPipeline(sender, workers, slog.New(slog.DiscardHandler)))
	pipeline := f.svc.Pipeline
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { pipeline.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); close(release); <-done })

	noisy, err := f.svc.Identity.CreateBrand(f.ctx, "Noisy")
	if err != nil {
		t.Fatal(err)
	}
	f.brandID = noisy.ID
	sub := func(brandID, url string) {
		t.Helper()
		if _, err := f.svc.Endpoints.CreateSubscription(f.ctx, brandID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventConversionCreated}}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range hangingEndpoints {
		sub(noisy.ID, hanging.URL+"/"+string(rune('a'+i%26))+string(rune('a'+i/26)))
	}
	offer, partner := f.offer(tally.ApprovalAuto, 0, tally.Caps{}), f.partner(true)
	own := newReceiver(t, 200)
	if _, err := f.svc.Endpoints.PutPostback(f.ctx, noisy.ID, partner.ID, endpoints.PostbackInput{URL: ptr(own.srv.URL + "/pb?c={conversion_id}")}); err != nil {
		t.Fatal(err)
	}
	for range noisyConversions {
		f.convert(offer.ID, partner.ID, conversions.ConversionInput{})
	}
	waitUntil(t, "every hanging endpoint to have an attempt under way", func() bool { return hung.Load() >= hangingEndpoints })

	// Another brand's test event and conversion, to a healthy receiver.
	quiet, err := f.svc.Identity.CreateBrand(f.ctx, "Quiet")
	if err != nil {
		t.Fatal(err)
	}
	theirs := newReceiver(t, 200)
	s, err := f.svc.Endpoints.CreateSubscription(f.ctx, quiet.ID, endpoints.SubscriptionInput{URL: &theirs.srv.URL, Events: []string{tally.EventConversionCreated}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Endpoints.SendTestEvent(f.ctx, quiet.ID, s.ID); err != nil {
		t.Fatal(err)
	}
	f.brandID = quiet.ID
	f.convert(f.offer(tally.ApprovalAuto, 0, tally.Caps{}).ID, f.partner(true).ID, conversions.ConversionInput{})

	waitUntil(t, "the other brand's two deliveries", func() bool { return len(theirs.requests()) == 2 })
	events := map[string]bool{}
	for _, r := range theirs.requests() {
		events[r.header.Get(webhook.EventHeader)] = true
	}
	if !events[tally.EventWebhookTest] || !events[tally.EventConversionCreated] {
		t.Errorf("the other brand's receiver got %v, want webhook.test and conversion.created", events)
	}
	waitUntil(t, "the noisy brand's postbacks", func() bool { return len(own.requests()) == noisyConversions })
	// Nothing was let go: every hanging attempt is still under way, one per endpoint.
	mu.Lock()
	defer mu.Unlock()
	if n := hung.Load(); n != hangingEndpoints || len(byPath) != hangingEndpoints {
		t.Errorf("%d attempts under way to %d of %d hanging endpoints, want one each", n, len(byPath), hangingEndpoints)
	}
	for path, n := range byPath {
		if n != 1 {
			t.Errorf("%d attempts under way to the hanging endpoint %s, want 1", n, path)
		}
	}
}

// waitUntil polls cond with a generous deadline.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
