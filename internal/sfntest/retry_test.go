package sfntest_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/statemachine"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// These tests run the deployed retry workflow, statemachine/retry.asl.json,
// with local-sfn: attempt 1 by the deliver function, whose Step Functions
// client starts the execution, then attempts 2 to 7 by the real attempt
// step in the state machine's task, with the waits cut to waitTime.

const secret = "whsec_0123456789abcdef"

// retryScenario delivers a webhook.test to a receiver answering status(n)
// to request n, through the deliver function and the retry workflow, which
// must succeed.
func retryScenario(t *testing.T, status func(n int) int) (f *fixture, ref endpoints.DeliveryRef, out executionOutput, runs []taskRun, rcv *receiver) {
	t.Helper()
	f, ref, name, rcv := startScenario(t, status)
	res := f.workflow.Wait(t, name)
	runs = f.taskRuns(t)
	if res.Status != sfntest.StatusSucceeded {
		t.Fatalf("the execution ended %v\ntask runs: %+v", res, runs)
	}
	var in attempt.RetryInput
	if json.Unmarshal([]byte(res.Input), &in) != nil || in.DeliveryRef != ref || in.Attempt != 0 || in.ResumeAt != nil || in.NextAttemptAt == nil {
		t.Errorf("execution input %s, want the delivery %+v and when attempt 2 is due", res.Input, ref)
	}
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("execution output %s: %v", res.Output, err)
	}
	if out.BrandID != ref.BrandID || out.DeliveryID != ref.DeliveryID {
		t.Errorf("execution output %s does not carry the delivery %+v", res.Output, ref)
	}
	return f, ref, out, runs, rcv
}

// startScenario delivers a webhook.test to a receiver answering status(n)
// to request n through the deliver function, whose attempt 1 must fail, and
// returns the delivery and the execution it started.
func startScenario(t *testing.T, status func(n int) int) (f *fixture, ref endpoints.DeliveryRef, name string, rcv *receiver) {
	t.Helper()
	return startScenarioWith(t, status, func(*fixture) {})
}

// startScenarioWith is startScenario with setup run on the fixture first.
func startScenarioWith(t *testing.T, status func(n int) int, setup func(*fixture)) (f *fixture, ref endpoints.DeliveryRef, name string, rcv *receiver) {
	t.Helper()
	sfntest.Find(t)
	f = newFixture(t)
	setup(f)
	rcv = newReceiver(t, status)
	ref, name = startOn(t, f, rcv)
	return f, ref, name, rcv
}

// startOn delivers a webhook.test to rcv through the deliver function,
// whose attempt 1 must fail, and returns the delivery and the execution
// it started.
func startOn(t *testing.T, f *fixture, rcv *receiver) (ref endpoints.DeliveryRef, name string) {
	t.Helper()
	sub := f.subscribe(t, rcv.URL, secret, tally.EventConversionCreated)
	evt, err := f.svc.Endpoints.SendTestEvent(t.Context(), f.brand.ID, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := f.function().Webhooks.FanOut(t.Context(), evt.ID)
	if err != nil || len(refs) != 1 {
		t.Fatalf("fan-out: %v, %d deliveries, want 1", err, len(refs))
	}
	ref = refs[0]

	started := f.deliver(t, message(t, "c0ffee00-0000-4000-8000-000000000001", ref))
	if want := ref.DeliveryID + "-0"; !slices.Equal(started, []string{want}) {
		t.Fatalf("the deliver function started %v after a failed attempt 1, want one execution named %s (the delivery id and its cycle)", started, want)
	}
	return ref, started[0]
}

// checkAttempts checks the task runs (attempts 2…last, one run each, no
// error) and that the receiver got one signed request per attempt, all
// with the delivery's webhook id.
func checkAttempts(t *testing.T, ref endpoints.DeliveryRef, runs []taskRun, rcv *receiver, last int) {
	t.Helper()
	var attempts, want []int
	for _, r := range runs {
		if r.Error != "" {
			t.Errorf("attempt %d failed: %s", r.Payload.Attempt, r.Error)
		}
		if r.Payload.DeliveryRef != ref {
			t.Errorf("attempt %d was for %+v, want %+v", r.Payload.Attempt, r.Payload.DeliveryRef, ref)
		}
		attempts = append(attempts, r.Payload.Attempt)
	}
	for n := 2; n <= last; n++ {
		want = append(want, n)
	}
	if !slices.Equal(attempts, want) {
		t.Errorf("the state machine's task made attempts %v, want %v", attempts, want)
	}
	reqs := rcv.requests()
	if len(reqs) != last {
		t.Fatalf("the receiver got %d requests, want %d", len(reqs), last)
	}
	for i, r := range reqs {
		if id := r.header.Get(webhook.WebhookIDHeader); id != ref.DeliveryID {
			t.Errorf("request %d: %s = %q, want %q on every retry", i+1, webhook.WebhookIDHeader, id, ref.DeliveryID)
		}
		if err := webhook.Verify(secret, r.header.Get(webhook.SignatureHeader), r.body, webhook.DefaultTolerance); err != nil {
			t.Errorf("request %d: %v", i+1, err)
		}
	}
}

// checkDelivery checks the delivery's record in the table.
func checkDelivery(t *testing.T, f *fixture, ref endpoints.DeliveryRef, status string, codes []int) {
	t.Helper()
	d, err := f.function().Deliveries.Delivery(t.Context(), ref.BrandID, ref.DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, a := range d.Attempts {
		got = append(got, a.StatusCode)
	}
	if d.Status != status || !slices.Equal(got, codes) {
		t.Errorf("delivery is %s with attempts answered %v, want %s with %v", d.Status, got, status, codes)
	}
	if d.NextAttemptAt != nil {
		t.Errorf("a %s delivery has a next attempt at %v", d.Status, d.NextAttemptAt)
	}
}

// The receiver fails attempts 1 to 3 and accepts attempt 4, the third retry.
func TestRetryRecoversOnThirdRetry(t *testing.T) {
	t.Parallel()
	f, ref, out, runs, rcv := retryScenario(t, func(n int) int {
		if n <= 3 {
			return 503
		}
		return 204
	})
	if out.Result.Status != tally.DeliverySucceeded || out.Result.Attempts != 4 {
		t.Errorf("the execution ended with %+v, want succeeded after 4 attempts", out.Result)
	}
	checkAttempts(t, ref, runs, rcv, 4)
	checkDelivery(t, f, ref, tally.DeliverySucceeded, []int{503, 503, 503, 204})
}

// The receiver never accepts: attempt 7 (the sixth retry) is the last, the
// delivery fails, and the execution ends in Done.
func TestRetryGivesUpAfterSeventhAttempt(t *testing.T) {
	t.Parallel()
	f, ref, out, runs, rcv := retryScenario(t, func(int) int { return 500 })
	if out.Result.Status != tally.DeliveryFailed || out.Result.Attempts != webhooks.MaxAttempts {
		t.Errorf("the execution ended with %+v, want failed after %d attempts", out.Result, webhooks.MaxAttempts)
	}
	checkAttempts(t, ref, runs, rcv, webhooks.MaxAttempts)
	checkDelivery(t, f, ref, tally.DeliveryFailed, slices.Repeat([]int{500}, webhooks.MaxAttempts))
	// Health counts the delivery that failed every attempt once, not its
	// seven attempts.
	subs, _, err := f.function().Endpoints.Subscriptions(t.Context(), ref.BrandID, records.ListParams{})
	if err != nil || len(subs) != 1 || subs[0].ConsecutiveFailures != 1 || subs[0].Status != tally.EndpointEnabled {
		t.Errorf("the subscription after one delivery failed every attempt: %+v, %v; want enabled, 1 consecutive failure", subs, err)
	}

	// The execution succeeded, and Done is the only state that ends one so.
	raw, err := os.ReadFile(filepath.Join("..", "..", statemachine.File))
	if err != nil {
		t.Fatal(err)
	}
	var def struct {
		States map[string]struct {
			Type string
			End  bool
		}
	}
	if err := json.Unmarshal(raw, &def); err != nil {
		t.Fatal(err)
	}
	for name, st := range def.States {
		succeeds := st.End || st.Type == "Succeed"
		if succeeds != (name == "Done") {
			t.Errorf("state %s (%s) succeeds = %v; the test takes Done as the only successful end", name, st.Type, succeeds)
		}
	}
}

// Attempt 3's task fails every time (standing in for the table or Lambda
// failing; the receiver is not involved): the task's retries run out, the
// Catch marks the delivery failed, and the execution fails (which the
// failed-executions alarm reports). The delivery is not left pending: it is
// failed with the attempts it had, and a manual retry takes it again.
func TestRetryAbandonsWhenTheTaskKeepsFailing(t *testing.T) {
	t.Parallel()
	f, ref, name, rcv := startFailing(t, "3")
	res := f.workflow.Wait(t, name)
	if res.Status != sfntest.StatusFailed || !strings.Contains(res.Cause, "the delivery is marked failed") {
		t.Fatalf("the execution ended %v, want it failed in %s", res, statemachine.AbandonedState)
	}
	want := append([]string{"2:pending"}, slices.Repeat([]string{"3:error"}, 7)...)
	if got := runSummary(f.taskRuns(t)); !slices.Equal(got, append(want, "abandon:failed")) {
		t.Errorf("task runs %v, want %v (attempt 3 tried 7 times)", got, append(want, "abandon:failed"))
	}
	if n := len(rcv.requests()); n != 2 {
		t.Errorf("the receiver got %d requests, want attempts 1 and 2", n)
	}
	checkDelivery(t, f, ref, tally.DeliveryFailed, []int{500, 500})
	if d, err := f.function().Deliveries.RetryDelivery(t.Context(), ref.BrandID, ref.DeliveryID); err != nil || d.Status != tally.DeliveryPending {
		t.Errorf("manual retry of the abandoned delivery: %+v, %v; want pending", d, err)
	}
}

// The execution fails without deciding the delivery (attempt 3's task and
// the abandon task both keep failing): the delivery is pending, its next
// attempt overdue. A message for it (the reconciler re-drives such
// deliveries) reaches the deliver function, which finds the execution's
// name taken, sees through DescribeExecution that it failed, and starts the
// schedule again under a new name at attempt 3, which now works: the
// delivery ends decided, each attempt made once.
func TestRetryRestartsAFailedExecution(t *testing.T) {
	t.Parallel()
	f, ref, name, rcv := startFailing(t, "3", "abandon")
	if res := f.workflow.Wait(t, name); res.Status != sfntest.StatusFailed {
		t.Fatalf("the first execution ended %v, want failed", res)
	}
	d, err := f.function().Deliveries.Delivery(t.Context(), ref.BrandID, ref.DeliveryID)
	if err != nil || d.Status != tally.DeliveryPending || len(d.Attempts) != 2 {
		t.Fatalf("after the failed execution: %+v, %v; want pending with 2 attempts", d, err)
	}

	f.failOnPurpose(t) // the trouble is over
	restarted := f.deliver(t, message(t, "c0ffee00-0000-4000-8000-000000000002", ref))
	if want := name + "-r1"; !slices.Equal(restarted, []string{want}) {
		t.Fatalf("the re-driven message started %v, want %s", restarted, want)
	}
	res := f.workflow.Wait(t, restarted[0])
	var in attempt.RetryInput
	if json.Unmarshal([]byte(res.Input), &in) != nil || in.Attempt != 3 || in.ResumeAt == nil || !in.ResumeAt.Equal(d.NextAttemptAt.Time) {
		t.Errorf("restart input %s, want attempt 3 at %v", res.Input, d.NextAttemptAt)
	}
	if res.Status != sfntest.StatusSucceeded {
		t.Fatalf("the restarted execution ended %v", res)
	}
	checkDelivery(t, f, ref, tally.DeliveryFailed, slices.Repeat([]int{500}, webhooks.MaxAttempts))
	if n := len(rcv.requests()); n != webhooks.MaxAttempts {
		t.Errorf("the receiver got %d requests, want %d: each attempt once", n, webhooks.MaxAttempts)
	}

	// The message once more: the delivery is decided, nothing starts.
	if again := f.deliver(t, message(t, "c0ffee00-0000-4000-8000-000000000003", ref)); len(again) != 0 {
		t.Errorf("a message for the decided delivery started %v", again)
	}
}

// startFailing starts a delivery to a receiver that always answers 500,
// with the attempt program failing the runs listed.
func startFailing(t *testing.T, runs ...string) (*fixture, endpoints.DeliveryRef, string, *receiver) {
	t.Helper()
	return startScenarioWith(t, func(int) int { return 500 }, func(f *fixture) { f.failOnPurpose(t, runs...) })
}

// runSummary writes task runs as "attempt:status", "attempt:error" and
// "abandon:status".
func runSummary(runs []taskRun) []string {
	var got []string
	for _, r := range runs {
		switch {
		case r.Payload.Abandon:
			got = append(got, "abandon:"+r.Result.Status)
		case r.Error != "":
			got = append(got, fmt.Sprintf("%d:error", r.Payload.Attempt))
		default:
			got = append(got, fmt.Sprintf("%d:%s", r.Payload.Attempt, r.Result.Status))
		}
	}
	return got
}
