// Command attempt is the retry state machine's task for tests: what
// functions/attempt does on AWS, as a program that local-sfn runs in place
// of the Lambda invoke (see package sfntest for how local-sfn calls it).
//
// Its one argument is the task's input, the parameters of the
// arn:aws:states:::lambda:invoke task: {"FunctionName": ..., "Payload":
// {"brandId", "deliveryId", "attempt"}}. It opens the store the way every
// function does (lambdafn.OpenDB: the DynamoDB table TALLY_TABLE names, its
// endpoint from AWS_ENDPOINT_URL_DYNAMODB), runs deliver.AttemptHandler on
// the payload, and prints what the invoke returns to the state machine:
// {"ExecutedVersion": "$LATEST", "Payload": <result>, "StatusCode": 200}.
// When the handler fails, it prints the error to stderr and exits 1, which
// fails the task as a function error would (States.TaskFailed).
//
// Unlike functions/attempt, its sender delivers to loopback receivers (the
// tests' httptest servers).
//
// When SFNTEST_TASK_LOG names a file, each run appends one JSON line to it:
// {"payload": ..., "result": ... | "error": "..."}.
//
// SFNTEST_FAIL_FILE names a file that lists runs to fail on purpose,
// standing in for an attempt task that cannot do its work (the table or
// Lambda failing): a comma list of attempt numbers and "abandon" (the
// Catch's task), read at each run, so a test can change it between runs.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/webhooks"
)

// TaskLogEnv names the file each run appends its input and outcome to.
const TaskLogEnv = "SFNTEST_TASK_LOG"

// FailFileEnv names the file listing the runs that fail on purpose.
const FailFileEnv = "SFNTEST_FAIL_FILE"

// timeout bounds a run: the attempt function's timeout (docs/aws.md).
const timeout = 20 * time.Second

// invokeOutput is the result of a lambda:invoke task.
type invokeOutput struct {
	ExecutedVersion string                 `json:"ExecutedVersion"`
	Payload         webhooks.AttemptResult `json:"Payload"`
	StatusCode      int                    `json:"StatusCode"`
}

func main() {
	// Only the result may reach stdout, which local-sfn parses as JSON.
	stdout := os.Stdout
	os.Stdout = os.Stderr
	if err := run(stdout); err != nil {
		fmt.Fprintln(os.Stderr, "attempt:", err)
		os.Exit(1)
	}
}

func run(stdout io.Writer) (err error) {
	if len(os.Args) != 2 {
		return fmt.Errorf("want the task input as the one argument, got %d arguments", len(os.Args)-1)
	}
	var task struct {
		Payload json.RawMessage `json:"Payload"`
	}
	if err := json.Unmarshal([]byte(os.Args[1]), &task); err != nil || task.Payload == nil {
		return fmt.Errorf("the task input is not lambda:invoke parameters with a Payload: %s", os.Args[1])
	}
	var res webhooks.AttemptResult
	defer func() { logTask(task.Payload, res, err) }()
	var in attempt.RetryInput
	if err := json.Unmarshal(task.Payload, &in); err != nil {
		return fmt.Errorf("payload: %w", err)
	}
	if failOnPurpose(in) {
		return fmt.Errorf("failing on purpose (%s)", FailFileEnv)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	db, err := lambdafn.OpenDB()
	if err != nil {
		return err
	}
	settings, err := app.ReadSettings()
	if err != nil {
		return err
	}
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true})
	// KMS cannot run here: the tests' services keep the data key of the
	// signing secrets unwrapped in the table, and so does this stand-in.
	if res, err = attempt.Handler(attempt.NewEngine(db, settings, nil, secretbox.New(db.Store, secretbox.Unwrapped{})), sender)(ctx, in); err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(invokeOutput{ExecutedVersion: "$LATEST", Payload: res, StatusCode: 200})
}

// logTask appends the run to the file TaskLogEnv names, if any.
func logTask(payload json.RawMessage, res webhooks.AttemptResult, err error) {
	path := os.Getenv(TaskLogEnv)
	if path == "" {
		return
	}
	line := map[string]any{"payload": payload, "result": res}
	if err != nil {
		line = map[string]any{"payload": payload, "error": err.Error()}
	}
	b, _ := json.Marshal(line)
	f, ferr := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if ferr != nil {
		fmt.Fprintln(os.Stderr, "attempt:", ferr)
		return
	}
	defer f.Close()
	if _, ferr := f.Write(append(b, '\n')); ferr != nil {
		fmt.Fprintln(os.Stderr, "attempt:", ferr)
	}
}

func failOnPurpose(in attempt.RetryInput) bool {
	run := strconv.Itoa(in.Attempt)
	if in.Abandon {
		run = "abandon"
	}
	list, _ := os.ReadFile(os.Getenv(FailFileEnv))
	return slices.Contains(strings.Split(strings.TrimSpace(string(list)), ","), run)
}
