package sfntest_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/statemachine"
	"github.com/tally-hq/tally/internal/tracking"
	"github.com/tally-hq/tally/webhook"
)

// These tests run the deployed retry workflow, statemachine/retry.asl.json,
// with local-sfn: attempt 1 by the deliver function, which starts the
// execution, then attempts 2 to 7 by the real attempt step in the state
// machine's task, with the waits cut to waitTime.

const secret = "whsec_0123456789abcdef"

// retryScenario delivers a webhook.test to a receiver answering status(n)
// to request n, through the deliver function and the retry workflow.
func retryScenario(t *testing.T, status func(n int) int) (f *fixture, ref tracking.DeliveryRef, out executionOutput, runs []taskRun, rcv *receiver) {
	t.Helper()
	sfntest.Find(t)
	f = newFixture(t)
	rcv = newReceiver(t, status)
	sub := f.subscribe(t, rcv.URL, secret, tally.EventConversionCreated)
	evt, err := f.svc.SendTestEvent(t.Context(), f.brand.ID, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := f.function().FanOut(t.Context(), evt.ID)
	if err != nil || len(refs) != 1 {
		t.Fatalf("fan-out: %v, %d deliveries, want 1", err, len(refs))
	}
	ref = refs[0]

	started := f.deliver(t, message(t, "c0ffee00-0000-4000-8000-000000000001", ref))
	if len(started) != 1 {
		t.Fatalf("the deliver function started %d executions after a failed attempt 1, want 1", len(started))
	}
	start := started[0]
	if got, want := aws.ToString(start.Name), ref.DeliveryID+"-0"; got != want {
		t.Errorf("execution name = %q, want %q (the delivery id and its cycle)", got, want)
	}
	if got := aws.ToString(start.StateMachineArn); got != stateMachineARN {
		t.Errorf("state machine = %q, want %q", got, stateMachineARN)
	}
	var in lambdafn.RetryInput
	if err := json.Unmarshal([]byte(aws.ToString(start.Input)), &in); err != nil || in.DeliveryRef != ref {
		t.Fatalf("execution input %s: %v, want the delivery %+v", aws.ToString(start.Input), err, ref)
	}

	raw, runs, err := f.retry(t, start)
	if err != nil {
		t.Fatalf("the execution failed: %v\ntask runs: %+v", err, runs)
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("execution output %s: %v", raw, err)
	}
	if out.BrandID != ref.BrandID || out.DeliveryID != ref.DeliveryID {
		t.Errorf("execution output %s does not carry the delivery %+v", raw, ref)
	}
	return f, ref, out, runs, rcv
}

// checkAttempts checks the task runs (attempts 2…last, one run each, no
// error) and that the receiver got one signed request per attempt, all
// with the delivery's webhook id.
func checkAttempts(t *testing.T, ref tracking.DeliveryRef, runs []taskRun, rcv *receiver, last int) {
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
func checkDelivery(t *testing.T, f *fixture, ref tracking.DeliveryRef, status string, codes []int) {
	t.Helper()
	d, err := f.function().Delivery(t.Context(), ref.BrandID, ref.DeliveryID)
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
	if out.Result.Status != tally.DeliveryFailed || out.Result.Attempts != tracking.MaxAttempts {
		t.Errorf("the execution ended with %+v, want failed after %d attempts", out.Result, tracking.MaxAttempts)
	}
	checkAttempts(t, ref, runs, rcv, tracking.MaxAttempts)
	checkDelivery(t, f, ref, tally.DeliveryFailed, slices.Repeat([]int{500}, tracking.MaxAttempts))

	// The execution succeeded, and Done is the only state that ends one.
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
		terminal := st.End || st.Type == "Succeed" || st.Type == "Fail"
		if terminal != (name == "Done") {
			t.Errorf("state %s (%s) terminal = %v; the test takes Done as the only end", name, st.Type, terminal)
		}
	}
}
