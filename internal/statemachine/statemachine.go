// Package statemachine generates the Step Functions definition (Amazon
// States Language) of the webhook retry workflow from webhooks.RetrySchedule,
// so the deployed schedule cannot drift from the one the code and the local
// server use. `go generate ./internal/statemachine` writes it to
// statemachine/retry.asl.json, which template.yaml and the CDK app both
// deploy; a test fails when the file and the generator disagree.
package statemachine

//go:generate go run ./gen ../../statemachine/retry.asl.json

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/webhooks"
)

// AttemptFunctionVar is the definition substitution that names the attempt
// function's ARN (SAM DefinitionSubstitutions, CDK definitionSubstitutions).
const AttemptFunctionVar = "AttemptFunctionArn"

// File is where the definition is kept, relative to the repository root.
const File = "statemachine/retry.asl.json"

// State names, which tests override with local-sfn.
func WaitState(retry int) string      { return fmt.Sprintf("Wait%d", retry) }
func AttemptState(attempt int) string { return fmt.Sprintf("Attempt%d", attempt) }
func decideState(attempt int) string  { return fmt.Sprintf("Decide%d", attempt) }

// PaceState waits, when attempt's task found its endpoint's pace used up
// (the result says paced, and when to ask again), before the same attempt.
func PaceState(attempt int) string { return fmt.Sprintf("Pace%d", attempt) }

const (
	startState  = "Start"
	resumeState = "Resume"
	doneState   = "Done"
	// WaitToResumeState waits, in a restarted execution, until the attempt
	// it resumes at is due.
	WaitToResumeState = "WaitToResume"
	// AbandonState is where an attempt task that keeps failing is caught:
	// it marks the delivery failed, and the execution ends in
	// AbandonedState, failed (the ExecutionsFailed alarm).
	AbandonState   = "Abandon"
	AbandonedState = "Abandoned"
)

// lambdaErrors are the transient errors of invoking a Lambda function; the
// attempt step is idempotent, so retrying it is safe.
var lambdaErrors = []string{"Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException", "Lambda.TooManyRequestsException", "States.TaskFailed"}

// taskRetry rides out about two minutes of failing invocations (2 s, 4 s, …
// 64 s between the 7 tries) before the Catch takes over.
var taskRetry = []any{map[string]any{"ErrorEquals": lambdaErrors, "IntervalSeconds": 2, "MaxAttempts": 6, "BackoffRate": 2}}

// taskTime bounds one task state with its retries: 7 tries of the attempt
// function (20 s timeout) and the pauses between them.
const taskTime = 7*20*time.Second + (2+4+8+16+32+64)*time.Second

// Timeout bounds an execution (TimeoutSeconds), so that one that hangs
// times out (the ExecutionsTimedOut alarm) and the reconciler restarts it:
// the longest each wait can be (the schedule's, or a receiver's
// Retry-After of up to delivery.MaxRetryAfter), one task time per attempt
// and for the abandon task, and an hour to spare. A restarted execution
// resumes part way, within the same bound.
func Timeout() time.Duration {
	d := time.Hour + time.Duration(len(webhooks.RetrySchedule)+1)*taskTime
	for _, w := range webhooks.RetrySchedule {
		d += max(w, delivery.MaxRetryAfter)
	}
	return d
}

// Definition returns the workflow: for each retry of the schedule, wait,
// make the attempt, and go on only while the delivery is still pending. Its
// input is {"brandId", "deliveryId", "nextAttemptAt"}; attempt 1 has been
// made before it starts. Each wait lasts until the time the attempt before
// it decided (nextAttemptAt: the schedule's wait, or longer when the
// receiver asked with Retry-After), not a fixed time; a pending result
// without one (the delivery is parked behind its endpoint's probe) ends
// the execution, as the reconciler and the breaker take it from there. A restarted execution (lambdafn's deliver function starts one
// when an earlier execution of the schedule ended without deciding the
// delivery) has {"attempt", "resumeAt"} too: it waits until resumeAt and
// goes on at that attempt. An attempt task that fails after its retries is
// caught: the delivery is marked failed rather than left pending. A task
// that found its endpoint's pace used up (paced: no attempt made, nothing
// written) waits in a Pace state until the nextAttemptAt it returned and
// asks for the same attempt again.
func Definition() ([]byte, error) {
	states := map[string]any{
		doneState:      map[string]any{"Type": "Succeed"},
		AbandonedState: map[string]any{"Type": "Fail", "Error": "AttemptFailed", "Cause": "The attempt task kept failing; the delivery is marked failed (a manual retry starts it again)."},
		AbandonState: map[string]any{
			"Type":     "Task",
			"Resource": "arn:aws:states:::lambda:invoke",
			"Parameters": map[string]any{
				"FunctionName": "${" + AttemptFunctionVar + "}",
				"Payload":      map[string]any{"brandId.$": "$.brandId", "deliveryId.$": "$.deliveryId", "abandon": true},
			},
			"ResultPath": nil,
			"Retry":      taskRetry,
			"Next":       AbandonedState,
		},
		startState: map[string]any{
			"Type":    "Choice",
			"Choices": []any{map[string]any{"Variable": "$.resumeAt", "IsPresent": true, "Next": WaitToResumeState}},
			"Default": WaitState(1),
		},
		WaitToResumeState: map[string]any{"Type": "Wait", "TimestampPath": "$.resumeAt", "Next": resumeState},
	}
	var resume []any
	for i := range webhooks.RetrySchedule {
		retry, attempt := i+1, i+2
		next := doneState
		if retry < len(webhooks.RetrySchedule) {
			next = WaitState(retry + 1)
		}
		due := "$.result.nextAttemptAt"
		if retry == 1 {
			due = "$.nextAttemptAt" // attempt 1's, in the execution's input
		}
		states[WaitState(retry)] = map[string]any{
			"Type": "Wait", "TimestampPath": due, "Next": AttemptState(attempt),
		}
		states[AttemptState(attempt)] = map[string]any{
			"Type":     "Task",
			"Resource": "arn:aws:states:::lambda:invoke",
			"Parameters": map[string]any{
				"FunctionName": "${" + AttemptFunctionVar + "}",
				"Payload":      map[string]any{"brandId.$": "$.brandId", "deliveryId.$": "$.deliveryId", "attempt": attempt},
			},
			"ResultSelector": map[string]any{"status.$": "$.Payload.status", "attempts.$": "$.Payload.attempts", "nextAttemptAt.$": "$.Payload.nextAttemptAt", "paced.$": "$.Payload.paced"},
			"ResultPath":     "$.result",
			"Retry":          taskRetry,
			"Catch":          []any{map[string]any{"ErrorEquals": []string{"States.ALL"}, "ResultPath": "$.error", "Next": AbandonState}},
			"Next":           decideState(attempt),
		}
		// A paced task made no attempt: the same one waits for its turn.
		// The wait is no attempt, and costs no retry of the schedule.
		states[PaceState(attempt)] = map[string]any{
			"Type": "Wait", "TimestampPath": "$.result.nextAttemptAt", "Next": AttemptState(attempt),
		}
		states[decideState(attempt)] = map[string]any{
			"Type": "Choice",
			"Choices": []any{map[string]any{"Variable": "$.result.paced", "BooleanEquals": true, "Next": PaceState(attempt)}, map[string]any{"And": []any{
				map[string]any{"Variable": "$.result.status", "StringEquals": "pending"},
				map[string]any{"Variable": "$.result.nextAttemptAt", "IsTimestamp": true},
			}, "Next": next}},
			"Default": doneState,
		}
		resume = append(resume, map[string]any{"Variable": "$.attempt", "NumericEquals": attempt, "Next": AttemptState(attempt)})
	}
	// An attempt outside the schedule has nothing left to do.
	states[resumeState] = map[string]any{"Type": "Choice", "Choices": resume, "Default": doneState}
	def := map[string]any{
		"Comment":        "Webhook retries: wait, attempt, until the delivery is decided. Generated from webhooks.RetrySchedule by internal/statemachine; do not edit.",
		"StartAt":        startState,
		"TimeoutSeconds": int(Timeout().Seconds()),
		"States":         states,
	}
	b, err := json.MarshalIndent(def, "", "  ")
	return append(b, '\n'), err
}
