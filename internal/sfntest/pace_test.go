package sfntest_test

import (
	"encoding/json"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn/deliver"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// A burst of conversions to a subscription with maxPerSecond 5, beside an
// unpaced one, on the AWS path (DynamoDB Local, fauxqs, the fan-out and
// deliver functions' handlers): every delivery is made at its first
// attempt, the waits counted as no attempt; the paced ones no more than 5
// in any second of the clock as their attempts started (the pace's
// one-second windows), so that the receiver sees at most two windows'
// worth in any span of a second; the unpaced subscription's deliveries are
// each made the first time their message is handled, beside the paced
// ones in its batch.
func TestPaceOnAWS(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	const pace, n = 5, 20
	p := newPipeline(t, 30*time.Second, ok200) // p.rcv: the unpaced subscription
	paced := newReceiver(t, ok200)
	sub := p.pacedSubscription(t, paced.URL, pace)

	p.conversions(t, n)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out.BatchItemFailures)
	}
	// Once each message the fan-out queued has been handled once, every
	// unpaced delivery is made: none waited behind a paced one in its batch.
	seen := map[string]bool{}
	unpacedDone := -1
	p.deliverUntil(t, time.Minute, func() bool { return len(paced.requests()) >= n && len(p.rcv.requests()) >= n }, func(msgs []events.SQSMessage) {
		for _, m := range msgs {
			var ref endpoints.DeliveryRef
			if err := json.Unmarshal([]byte(m.Body), &ref); err != nil {
				t.Fatal(err)
			}
			seen[ref.DeliveryID] = true
		}
		if unpacedDone < 0 && len(seen) == 2*n {
			unpacedDone = len(p.rcv.requests())
		}
	})
	if unpacedDone != n {
		t.Errorf("when each delivery's message had been handled once, the unpaced receiver had %d requests, want all %d: the paced backlog held it up", unpacedDone, n)
	}

	ds := p.allDeliveries(t)
	if len(ds) != 2*n {
		t.Fatalf("%d deliveries, want %d", len(ds), 2*n)
	}
	perSecond := map[int64]int{}
	for _, d := range ds {
		if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 {
			t.Errorf("delivery %s to %s: %s after %d attempts, want succeeded at the first: a wait for the pace is no attempt", d.ID, d.SubscriptionID, d.Status, len(d.Attempts))
			continue
		}
		if d.SubscriptionID == sub {
			perSecond[d.Attempts[0].At.Unix()]++
		}
	}
	for sec, count := range perSecond {
		if count > pace {
			t.Errorf("%d attempts to the paced subscription started in the second %v, want at most %d", count, time.Unix(sec, 0).UTC(), pace)
		}
	}
	reqs := paced.requests()
	ids := map[string]bool{}
	for _, r := range reqs {
		ids[r.header.Get(webhook.WebhookIDHeader)] = true
	}
	if len(reqs) != n || len(ids) != n {
		t.Errorf("the paced receiver got %d requests for %d deliveries, want %d, one each", len(reqs), len(ids), n)
	}
	for i := range reqs {
		j := i
		for j < len(reqs) && reqs[j].at.Sub(reqs[i].at) < time.Second {
			j++
		}
		if j-i > 2*pace {
			t.Errorf("the paced receiver got %d requests within a second from %v, want at most %d", j-i, reqs[i].at, 2*pace)
		}
	}
	if free := p.rcv.requests(); len(free) != n {
		t.Errorf("the unpaced receiver got %d requests, want %d", len(free), n)
	}
	if res := p.reconcile(t); res.Events != 0 || res.Deliveries != 0 {
		t.Errorf("the reconciler re-drove %+v, want nothing: every event left the outbox", res)
	}
}

// Retries to a paced endpoint wait for its pace in the retry workflow (its
// Pace states), the wait counted as no attempt: three deliveries fail
// attempt 1 together, their endpoint is then paced at one a second, its
// places taken by other attempts until an attempt task finds none; the
// attempts 2 then start in different seconds, and all succeed.
func TestPacedRetriesOnAWS(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	const n = 3 // the third fails before it knows of two failures: no circuit opens
	fail := atomic.Bool{}
	fail.Store(true)
	p := newPipelineWaiting(t, 2*time.Second, 30*time.Second, func(int) int {
		if fail.Load() {
			return http.StatusInternalServerError
		}
		return http.StatusNoContent
	})
	p.conversions(t, n)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out.BatchItemFailures)
	}
	if got := p.deliverAll(t); got != n {
		t.Fatalf("the deliver function took %d messages, want %d", got, n)
	}
	// They wait 2 s for attempt 2: time to pace their endpoint.
	subs, _, err := p.svc.Endpoints.Subscriptions(t.Context(), p.brand.ID, records.ListParams{Limit: 1})
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	one := 1
	if _, err := p.svc.Endpoints.UpdateSubscription(t.Context(), p.brand.ID, subs[0].ID, endpoints.SubscriptionInput{MaxPerSecond: &one}); err != nil {
		t.Fatal(err)
	}
	fail.Store(false)
	// Other attempts to the endpoint (another function's) take each
	// second's place until an attempt task has found it taken.
	hog := ratelimit.NewShared(p.svc.DB)
	deadline := time.Now().Add(30 * time.Second)
	for !slices.ContainsFunc(p.taskRuns(t), func(r taskRun) bool { return r.Result.Paced }) {
		if time.Now().After(deadline) {
			t.Fatalf("no attempt task found the pace used up: %+v", p.taskRuns(t))
		}
		if _, err := hog.AllowPer(t.Context(), webhooks.PaceBucket(p.brand.ID, subs[0].ID), one, time.Second); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, name := range p.workflow.Names() {
		if res := p.workflow.Wait(t, name); res.Status != sfntest.StatusSucceeded {
			t.Errorf("execution %s ended %v", name, res)
		}
	}
	seconds := map[int64]bool{}
	for _, d := range p.allDeliveries(t) {
		if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 2 {
			t.Errorf("delivery %s: %s after %d attempts, want succeeded at the second: a wait for the pace is no attempt", d.ID, d.Status, len(d.Attempts))
			continue
		}
		seconds[d.Attempts[1].At.Unix()] = true
	}
	if len(seconds) != n {
		t.Errorf("the %d attempts 2 started in %d different seconds, want %d: one a second", n, len(seconds), n)
	}
}

// pacedSubscription subscribes url to conversion.created at perSecond.
func (p *pipeline) pacedSubscription(t *testing.T, url string, perSecond int) string {
	t.Helper()
	s := secret
	sub, err := p.svc.Endpoints.CreateSubscription(t.Context(), p.brand.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventConversionCreated}, Secret: &s, MaxPerSecond: &perSecond})
	if err != nil {
		t.Fatal(err)
	}
	return sub.ID
}

// deliverUntil runs the deliver function on the queue's messages, a batch
// at a time, waiting for delayed ones, until done or the time is up; after
// each batch it calls handled with it, when set.
func (p *pipeline) deliverUntil(t *testing.T, limit time.Duration, done func() bool, handled func([]events.SQSMessage)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("not done after %v", limit)
		}
		msgs := sqstest.Receive(t, p.sqs, p.queue, 10, time.Second)
		if len(msgs) > 0 {
			p.deliver(t, msgs...) // fails the test on a batch item failure
			sqstest.Finish(t, p.sqs, p.queue, msgs, events.SQSEventResponse{})
			if handled != nil {
				handled(msgs)
			}
		}
	}
}

// TestPaceLoadOnAWS measures, when TALLY_PACE_LOAD is set (to a
// maxPerSecond), the deliveries a second to a subscription at that pace
// beside an unpaced one, ten seconds' worth of conversions, on
// the AWS path: conversions fanned out into fauxqs, the deliver function's
// handler on up to 4 batches of 10 at once (as concurrent invocations), the
// pace's counters in DynamoDB Local (docs/aws.md, "Per-endpoint pace").
// It asserts nothing TestPaceOnAWS does not; it prints the figures.
func TestPaceLoadOnAWS(t *testing.T) {
	pace, err := strconv.Atoi(os.Getenv("TALLY_PACE_LOAD"))
	if err != nil || pace < 1 {
		t.Skip("set TALLY_PACE_LOAD to the maxPerSecond to measure at (100)")
	}
	const invocations = 4
	n := 10 * pace // ten seconds' worth
	p := newPipeline(t, 30*time.Second, ok200)
	paced := newReceiver(t, ok200)
	p.pacedSubscription(t, paced.URL, pace)
	p.conversions(t, n)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out.BatchItemFailures)
	}
	// Each round takes up to invocations batches and hands them to the
	// deliver function's handler at once, as concurrent invocations would.
	h := deliver.DeliverHandler(p.function().Webhooks, loopbackSender(), p.sfn, stateMachineARN, p.later, p.log)
	start := time.Now()
	deadline := start.Add(5 * time.Minute)
	for len(paced.requests()) < n || len(p.rcv.requests()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 minutes: %d paced, %d unpaced deliveries made, want %d each", len(paced.requests()), len(p.rcv.requests()), n)
		}
		var batches [][]events.SQSMessage
		for range invocations {
			if msgs := sqstest.Receive(t, p.sqs, p.queue, 10, 0); len(msgs) > 0 {
				batches = append(batches, msgs)
			}
		}
		if len(batches) == 0 {
			time.Sleep(50 * time.Millisecond) // the rest are delayed
			continue
		}
		resps := make([]events.SQSEventResponse, len(batches))
		errs := make([]error, len(batches))
		var wg sync.WaitGroup
		for i, msgs := range batches {
			wg.Go(func() { resps[i], errs[i] = h(lambdaContext(t.Context(), "deliver"), events.SQSEvent{Records: msgs}) })
		}
		wg.Wait()
		for i, msgs := range batches {
			if errs[i] != nil || len(resps[i].BatchItemFailures) > 0 {
				t.Fatalf("deliver: %v, failures %+v", errs[i], resps[i].BatchItemFailures)
			}
			sqstest.Finish(t, p.sqs, p.queue, msgs, resps[i])
		}
	}
	rate := func(reqs []request) float64 {
		return float64(len(reqs)-1) / reqs[len(reqs)-1].at.Sub(reqs[0].at).Seconds()
	}
	most := func(reqs []request) int {
		perSecond := map[int64]int{}
		for _, r := range reqs {
			perSecond[r.at.Unix()]++
		}
		return slices.Max(slices.Collect(maps.Values(perSecond)))
	}
	free, pr := p.rcv.requests(), paced.requests()
	t.Logf("%d conversions, %d deliveries each way, deliver on %d batches at once", n, n, invocations)
	t.Logf("unpaced: %.0f/s, the last %v after the first message was taken", rate(free), free[len(free)-1].at.Sub(start).Round(time.Millisecond))
	t.Logf("paced at %d/s: %.1f/s, at most %d in a second of the clock, the last %v after the first message was taken", pace, rate(pr), most(pr), pr[len(pr)-1].at.Sub(start).Round(time.Millisecond))
}
