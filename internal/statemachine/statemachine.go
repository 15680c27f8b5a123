// Package statemachine generates the Step Functions definition (Amazon
// States Language) of the webhook retry workflow from tracking.RetrySchedule,
// so the deployed schedule cannot drift from the one the code and the local
// server use. `go generate ./internal/statemachine` writes it to
// statemachine/retry.asl.json, which template.yaml and the CDK app both
// deploy; a test fails when the file and the generator disagree.
package statemachine

//go:generate go run ./gen ../../statemachine/retry.asl.json

import (
	"encoding/json"
	"fmt"

	"github.com/tally-hq/tally/internal/tracking"
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

const doneState = "Done"

// lambdaErrors are the transient errors of invoking a Lambda function; the
// attempt step is idempotent, so retrying it is safe.
var lambdaErrors = []string{"Lambda.ServiceException", "Lambda.AWSLambdaException", "Lambda.SdkClientException", "Lambda.TooManyRequestsException", "States.TaskFailed"}

// Definition returns the workflow: for each retry of the schedule, wait,
// make the attempt, and go on only while the delivery is still pending. Its
// input is {"brandId", "deliveryId"}; attempt 1 has been made before it
// starts.
func Definition() ([]byte, error) {
	states := map[string]any{doneState: map[string]any{"Type": "Succeed"}}
	for i, wait := range tracking.RetrySchedule {
		retry, attempt := i+1, i+2
		next := doneState
		if retry < len(tracking.RetrySchedule) {
			next = WaitState(retry + 1)
		}
		states[WaitState(retry)] = map[string]any{
			"Type": "Wait", "Seconds": int(wait.Seconds()), "Next": AttemptState(attempt),
		}
		states[AttemptState(attempt)] = map[string]any{
			"Type":     "Task",
			"Resource": "arn:aws:states:::lambda:invoke",
			"Parameters": map[string]any{
				"FunctionName": "${" + AttemptFunctionVar + "}",
				"Payload":      map[string]any{"brandId.$": "$.brandId", "deliveryId.$": "$.deliveryId", "attempt": attempt},
			},
			"ResultSelector": map[string]any{"status.$": "$.Payload.status", "attempts.$": "$.Payload.attempts"},
			"ResultPath":     "$.result",
			"Retry":          []any{map[string]any{"ErrorEquals": lambdaErrors, "IntervalSeconds": 2, "MaxAttempts": 6, "BackoffRate": 2}},
			"Next":           decideState(attempt),
		}
		states[decideState(attempt)] = map[string]any{
			"Type":    "Choice",
			"Choices": []any{map[string]any{"Variable": "$.result.status", "StringEquals": "pending", "Next": next}},
			"Default": doneState,
		}
	}
	def := map[string]any{
		"Comment": "Webhook retries: wait, attempt, until the delivery is decided. Generated from tracking.RetrySchedule by internal/statemachine; do not edit.",
		"StartAt": WaitState(1),
		"States":  states,
	}
	b, err := json.MarshalIndent(def, "", "  ")
	return append(b, '\n'), err
}
