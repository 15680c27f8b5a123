package service_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
)

// acceptingSender stands in for a receiver that always answers 200.
type acceptingSender struct{ now func() time.Time }

func (s acceptingSender) Send(context.Context, outgoing.Request) tally.Attempt {
	return tally.Attempt{At: tally.NewTime(s.now()), StatusCode: 200}
}

// raceAttempts makes attempt n of every delivery at once.
func raceAttempts(t *testing.T, f *fixture, refs []endpoints.DeliveryRef, n int, sender webhooks.Sender) {
	t.Helper()
	var ready, done sync.WaitGroup
	gun := make(chan struct{})
	errs := make([]error, len(refs))
	for i, ref := range refs {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			ready.Done()
			<-gun
			_, errs[i] = f.svc.Webhooks.Attempt(f.ctx, ref, n, sender)
		}()
	}
	ready.Wait()
	close(gun)
	done.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// fanOutAll fans out every event of the given name not fanned out yet.
func fanOutAll(t *testing.T, f *fixture, name string) []endpoints.DeliveryRef {
	t.Helper()
	var refs []endpoints.DeliveryRef
	for _, evt := range f.events(name) {
		got, err := f.svc.Webhooks.FanOut(f.ctx, evt.ID)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, got...)
	}
	return refs
}

// TestEndpointHealthIsExactUnderConcurrentAttempts races failed attempts to
// one endpoint: attempts that are retried count toward nothing, every
// delivery that failed every attempt is counted once, the endpoint is
// disabled once the threshold is crossed, and it then gets no new
// deliveries while the ones it has go on.
func TestEndpointHealthIsExactUnderConcurrentAttempts(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		const threshold, racers = 10, 32
		f := &fixture{t: t, ctx: context.Background(), st: st, clock: testenv.NewClock(start)}
		f.svc = servicetest.New(st, service.WithClock(f.clock.Now), service.WithEndpointHealth(threshold, 0))
		b, err := f.svc.Identity.CreateBrand(f.ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		f.brandID = b.ID
		url := "https://hooks.example.com/x"
		sub, err := f.svc.Endpoints.CreateSubscription(f.ctx, f.brandID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}})
		if err != nil {
			t.Fatal(err)
		}
		if sub.Status != tally.EndpointEnabled || sub.ConsecutiveFailures != 0 || sub.LastSuccessAt != nil {
			t.Fatalf("a new subscription: %+v", sub.EndpointHealth)
		}
		for range racers {
			f.partner(false)
		}
		refs := fanOutAll(t, f, tally.EventPartnerApplied)
		if len(refs) != racers {
			t.Fatalf("%d deliveries, want %d", len(refs), racers)
		}

		failAll := func(refs []endpoints.DeliveryRef, from int) {
			for n := from; n <= webhooks.MaxAttempts; n++ {
				raceAttempts(t, f, refs, n, refusingSender{f.clock.Now})
				if n == webhooks.MaxAttempts {
					return
				}
				got, _ := f.svc.Endpoints.Subscription(f.ctx, f.brandID, sub.ID)
				if h := got.EndpointHealth; h.ConsecutiveFailures != 0 || h.Status != tally.EndpointEnabled || h.FailingSince == nil {
					t.Fatalf("after attempt %d of %d deliveries: %+v; want enabled and failing, no delivery failed", n, len(refs), h)
				}
				f.clock.Advance(webhooks.RetrySchedule[n-1])
			}
		}
		failAll(refs, 1)
		got, err := f.svc.Endpoints.Subscription(f.ctx, f.brandID, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		h := got.EndpointHealth
		if h.ConsecutiveFailures != racers || h.Status != tally.EndpointDisabled || h.DisabledReason != tally.DisabledConsecutiveFailures ||
			h.DisabledAt == nil || h.FailingSince == nil || !h.FailingSince.Equal(start) {
			t.Fatalf("after %d deliveries failed every attempt at once (threshold %d): %+v", racers, threshold, h)
		}

		// Disabled: a new event makes no delivery.
		f.partner(false)
		if refs2 := fanOutAll(t, f, tally.EventPartnerApplied); len(refs2) != 0 {
			t.Errorf("a disabled subscription got %d new deliveries", len(refs2))
		}

		// Enabled again it starts from zero; a success clears the count.
		enabled, err := f.svc.Endpoints.EnableSubscription(f.ctx, f.brandID, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		if enabled.Status != tally.EndpointEnabled || enabled.ConsecutiveFailures != 0 || enabled.FailingSince != nil || enabled.DisabledReason != "" {
			t.Errorf("enabled: %+v", enabled.EndpointHealth)
		}
		f.clock.Advance(5 * time.Second)
		for _, ref := range refs {
			if _, err := f.svc.Deliveries.RetryDelivery(f.ctx, ref.BrandID, ref.DeliveryID); err != nil {
				t.Fatal(err)
			}
		}
		failAll(refs[:threshold-1], 1)
		if got, _ := f.svc.Endpoints.Subscription(f.ctx, f.brandID, sub.ID); got.ConsecutiveFailures != threshold-1 || got.Status != tally.EndpointEnabled {
			t.Errorf("after %d deliveries failed: %+v; want them counted, enabled", threshold-1, got.EndpointHealth)
		}
		raceAttempts(t, f, refs[threshold-1:], 1, acceptingSender{f.clock.Now})
		healthy, _ := f.svc.Endpoints.Subscription(f.ctx, f.brandID, sub.ID)
		if healthy.Status != tally.EndpointEnabled || healthy.ConsecutiveFailures != 0 || healthy.FailingSince != nil ||
			healthy.LastSuccessAt == nil || !healthy.LastSuccessAt.Equal(f.clock.Now()) {
			t.Errorf("after %d failed deliveries, then successes: %+v; want enabled, nothing failing", threshold-1, healthy.EndpointHealth)
		}
	})
}

// TestEndpointDisabledAfterFailingTooLong: a few failures spread over more
// than the time threshold disable the endpoint, however few they are.
func TestEndpointDisabledAfterFailingTooLong(t *testing.T) {
	st := testenv.Bolt(t)
	f := &fixture{t: t, ctx: context.Background(), st: st, clock: testenv.NewClock(start)}
	f.svc = servicetest.New(st, service.WithClock(f.clock.Now), service.WithEndpointHealth(0, 48*time.Hour))
	b, _ := f.svc.Identity.CreateBrand(f.ctx, "Acme")
	f.brandID = b.ID
	url := "https://hooks.example.com/x"
	sub, err := f.svc.Endpoints.CreateSubscription(f.ctx, f.brandID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []time.Duration{0, 24 * time.Hour, 24*time.Hour - time.Millisecond, time.Millisecond} {
		f.clock.Advance(step)
		f.partner(false)
		for _, ref := range fanOutAll(t, f, tally.EventPartnerApplied) {
			if _, err := f.svc.Webhooks.Attempt(f.ctx, ref, 1, refusingSender{f.clock.Now}); err != nil {
				t.Fatal(err)
			}
		}
		got, _ := f.svc.Endpoints.Subscription(f.ctx, f.brandID, sub.ID)
		failingFor := f.clock.Now().Sub(start)
		if wantDisabled := failingFor >= 48*time.Hour; (got.Status == tally.EndpointDisabled) != wantDisabled {
			t.Fatalf("failing for %v: %+v", failingFor, got.EndpointHealth)
		}
		if got.Status == tally.EndpointDisabled && got.DisabledReason != tally.DisabledFailingTooLong {
			t.Errorf("disabled for %q, want %q", got.DisabledReason, tally.DisabledFailingTooLong)
		}
	}
}
