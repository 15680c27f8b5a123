package sfntest_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/sfntest"
)

// A receiver that answers attempt 1 with 503 and Retry-After: 6 gets
// attempt 2 no sooner than 6 s later, although the schedule's first wait
// is 1 s: the Wait states wait as deployed, until the time the attempt
// decided.
func TestRetryAfterDelaysTheNextAttemptOnAWS(t *testing.T) {
	t.Parallel()
	sfntest.Find(t)
	f := newFixtureWaiting(t, sfntest.AsDefined)
	rcv := newReceiver(t, func(n int) int {
		if n == 1 {
			return http.StatusServiceUnavailable
		}
		return http.StatusNoContent
	})
	rcv.header = func(n int) http.Header {
		if n == 1 {
			return http.Header{"Retry-After": {"6"}}
		}
		return nil
	}
	ref, name := startOn(t, f, rcv)
	res := f.workflow.Wait(t, name)
	if res.Status != sfntest.StatusSucceeded {
		t.Fatalf("the execution ended %v", res)
	}
	reqs := rcv.requests()
	if len(reqs) != 2 {
		t.Fatalf("the receiver got %d requests, want 2", len(reqs))
	}
	if gap := reqs[1].at.Sub(reqs[0].at); gap < 6*time.Second {
		t.Errorf("attempt 2 came %v after attempt 1, want at least the 6 s the receiver asked for", gap)
	}
	var in attempt.RetryInput
	if json.Unmarshal([]byte(res.Input), &in) != nil || in.NextAttemptAt == nil || in.NextAttemptAt.Before(reqs[0].at.Add(6*time.Second).Truncate(time.Millisecond)) {
		t.Errorf("execution input %s, want attempt 2 due 6 s after attempt 1 (%v)", res.Input, reqs[0].at)
	}
	checkDelivery(t, f, ref, tally.DeliverySucceeded, []int{503, 204})
}

// A receiver that answers attempt 2 with 410 Gone ends the execution
// there: the delivery fails, the subscription is disabled as gone, and no
// attempt 3 is made.
func TestGoneEndsTheExecutionOnAWS(t *testing.T) {
	t.Parallel()
	f, ref, out, runs, rcv := retryScenario(t, func(n int) int {
		if n == 1 {
			return http.StatusInternalServerError
		}
		return http.StatusGone
	})
	if out.Result.Status != tally.DeliveryFailed || out.Result.Attempts != 2 {
		t.Errorf("the execution ended with %+v, want failed after 2 attempts", out.Result)
	}
	checkAttempts(t, ref, runs, rcv, 2)
	checkDelivery(t, f, ref, tally.DeliveryFailed, []int{500, 410})
	subs, _, err := f.function().Endpoints.Subscriptions(t.Context(), ref.BrandID, records.ListParams{})
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	if s := subs[0]; s.Status != tally.EndpointDisabled || s.DisabledReason != "gone" {
		t.Errorf("the subscription is %s (%q) after a 410, want disabled, gone", s.Status, s.DisabledReason)
	}
	if got := runSummary(runs); !slices.Equal(got, []string{"2:failed"}) {
		t.Errorf("task runs %v, want attempt 2 only", got)
	}
}
