package sfntest_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/tally-hq/tally/internal/sfntest"
)

// These tests pin how local-sfn calls a task override, as the package
// documentation describes it.

// script writes an executable shell script into the test's folder.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "task.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

const probeDefinition = `{
  "StartAt": "Call",
  "States": {
    "Call": {
      "Type": "Task",
      "Resource": "arn:aws:states:::lambda:invoke",
      "Parameters": {"FunctionName": "${Fn}", "Payload": {"n.$": "$.n"}},
      "ResultSelector": {"echo.$": "$.Payload"},
      "ResultPath": "$.result",
      "Retry": [{"ErrorEquals": ["States.TaskFailed"], "IntervalSeconds": 60, "MaxAttempts": 2}],
      "Next": "Pause"
    },
    "Pause": {"Type": "Wait", "Seconds": 3600, "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}`

// The program gets the task's input after Parameters as its one argument,
// no stdin and local-sfn's environment; its stdout is the task's result,
// before ResultSelector. The hour-long Wait takes its override's time.
func TestOverrideInputAndOutput(t *testing.T) {
	t.Parallel()
	task := script(t, `if read -r _; then stdin=yes; else stdin=no; fi
printf '{"Payload": {"arg": %s, "argc": %d, "stdin": "%s", "env": "%s"}}\n' "$1" "$#" "$stdin" "$SFNTEST_PROBE"
`)
	const fn = "arn:aws:lambda:us-east-1:123456789012:function:probe"
	out, err := sfntest.Run(t, sfntest.Execution{
		Definition: sfntest.Substitute(t, []byte(probeDefinition), map[string]string{"Fn": fn}),
		Input:      []byte(`{"n": 7}`),
		Tasks:      map[string]string{"Call": task},
		Waits:      map[string]time.Duration{"Pause": 10 * time.Millisecond},
		Env:        []string{"SFNTEST_PROBE=from the test"},
		Timeout:    time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"n":7,"result":{"echo":{"arg":{"FunctionName":"` + fn + `","Payload":{"n":7}},"argc":1,"stdin":"no","env":"from the test"}}}`
	if !jsonEqual(t, out, []byte(want)) {
		t.Errorf("output %s, want %s", out, want)
	}
}

// A program that exits non-zero fails the task with its stderr; the
// failure matches States.TaskFailed, so the state's Retry runs it again.
func TestOverrideFailure(t *testing.T) {
	t.Parallel()
	runs := filepath.Join(t.TempDir(), "runs")
	task := script(t, `echo run >> "$SFNTEST_RUNS"
echo "receiver on fire" >&2
exit 3
`)
	_, err := sfntest.Run(t, sfntest.Execution{
		Definition: sfntest.Substitute(t, []byte(probeDefinition), map[string]string{"Fn": "arn:aws:lambda:us-east-1:123456789012:function:probe"}),
		Input:      []byte(`{"n": 7}`),
		Tasks:      map[string]string{"Call": task},
		Waits:      map[string]time.Duration{"Pause": 0},
		Retries:    map[string]time.Duration{"Call": 0},
		Env:        []string{"SFNTEST_RUNS=" + runs},
		Timeout:    time.Minute,
	})
	var failed *sfntest.ExecutionError
	if !errors.As(err, &failed) || !strings.Contains(failed.Message, "('Call'): receiver on fire") {
		t.Fatalf("error %v, want the execution to fail with the task's stderr", err)
	}
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "run\n"); n != 3 {
		t.Errorf("the task ran %d times, want 3 (MaxAttempts 2 retries)", n)
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// The Server answers StartExecution, DescribeExecution and StopExecution as
// a STANDARD state machine does, through the SDK's client.
func TestServer(t *testing.T) {
	t.Parallel()
	const smARN = "arn:aws:states:us-east-1:123456789012:stateMachine:probe"
	task := script(t, `printf '{"Payload": %s}\n' "$1"`)
	srv := sfntest.NewServer(t, smARN, sfntest.Execution{
		Definition: sfntest.Substitute(t, []byte(probeDefinition), map[string]string{"Fn": "arn:aws:lambda:us-east-1:123456789012:function:probe"}),
		Tasks:      map[string]string{"Call": task},
		Waits:      map[string]time.Duration{"Pause": 300 * time.Millisecond},
		Timeout:    time.Minute,
	})
	c := sfn.New(sfn.Options{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("x", "x", ""), BaseEndpoint: aws.String(srv.URL)})
	ctx := t.Context()
	start := func(name, input string) error {
		_, err := c.StartExecution(ctx, &sfn.StartExecutionInput{StateMachineArn: aws.String(smARN), Name: aws.String(name), Input: aws.String(input)})
		return err
	}
	status := func(name string) sfntypes.ExecutionStatus {
		out, err := c.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(srv.ExecutionARN(name))})
		if err != nil {
			t.Fatal(err)
		}
		return out.Status
	}
	var exists *sfntypes.ExecutionAlreadyExists
	if err := start("a", `{"n": 1}`); err != nil {
		t.Fatal(err)
	}
	if err := start("a", `{"n": 1}`); err != nil {
		t.Errorf("a repeated start of the running execution: %v, want it answered", err)
	}
	if err := start("a", `{"n": 2}`); !errors.As(err, &exists) {
		t.Errorf("the running execution's name with another input: %v, want ExecutionAlreadyExists", err)
	}
	if s := status("a"); s != sfntypes.ExecutionStatusRunning {
		t.Errorf("status %s, want RUNNING", s)
	}
	if res := srv.Wait(t, "a"); res.Status != sfntest.StatusSucceeded || !jsonEqual(t, res.Output, []byte(`{"n":1,"result":{"echo":{"FunctionName":"arn:aws:lambda:us-east-1:123456789012:function:probe","Payload":{"n":1}}}}`)) {
		t.Errorf("execution a ended %v", res)
	}
	if s := status("a"); s != sfntypes.ExecutionStatusSucceeded {
		t.Errorf("status %s, want SUCCEEDED", s)
	}
	if err := start("a", `{"n": 1}`); !errors.As(err, &exists) {
		t.Errorf("the name of an execution that ended: %v, want ExecutionAlreadyExists", err)
	}
	if err := start("b", `{"n": 3}`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.StopExecution(ctx, &sfn.StopExecutionInput{ExecutionArn: aws.String(srv.ExecutionARN("b"))}); err != nil {
		t.Fatal(err)
	}
	if s := status("b"); s != sfntypes.ExecutionStatusAborted {
		t.Errorf("status %s after StopExecution, want ABORTED", s)
	}
	var missing *sfntypes.ExecutionDoesNotExist
	if _, err := c.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(srv.ExecutionARN("c"))}); !errors.As(err, &missing) {
		t.Errorf("describing an execution never started: %v, want ExecutionDoesNotExist", err)
	}
	if got := srv.Names(); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("executions %v", got)
	}
}
