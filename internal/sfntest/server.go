package sfntest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server stands in for the Step Functions API of one STANDARD state
// machine, for the SDK's client (sfn.Client with BaseEndpoint set to URL):
// StartExecution, DescribeExecution and StopExecution in the AWS JSON 1.0
// protocol. The API's bookkeeping is this server's, written from the
// service's documentation (names unique per state machine, a repeated start
// of a running execution with the same input answering with it, closed
// executions keeping their names, statuses); each execution itself runs in
// a local-sfn process of its own, as Run runs one.
type Server struct {
	URL             string
	StateMachineARN string

	t     testing.TB
	tools Tools
	ex    Execution // every execution's definition, overrides, environment and timeout
	args  []string

	mu    sync.Mutex
	execs []*serverExecution
	wg    sync.WaitGroup
}

type serverExecution struct {
	name, input string
	started     time.Time
	stop        context.CancelFunc
	done        chan struct{}

	// Set when done is closed.
	status  string // RUNNING, SUCCEEDED, FAILED, TIMED_OUT, ABORTED
	output  json.RawMessage
	cause   string
	stopped time.Time
}

// Execution statuses, as DescribeExecution answers them.
const (
	StatusRunning   = "RUNNING"
	StatusSucceeded = "SUCCEEDED"
	StatusFailed    = "FAILED"
	StatusTimedOut  = "TIMED_OUT"
	StatusAborted   = "ABORTED"
)

var executionName = regexp.MustCompile(`^[0-9A-Za-z_-]{1,80}$`)

// NewServer serves the state machine stateMachineARN, whose executions run
// ex (its Input is ignored: each execution has its own). Executions still
// running when the test ends are stopped.
func NewServer(t testing.TB, stateMachineARN string, ex Execution) *Server {
	t.Helper()
	s := &Server{StateMachineARN: stateMachineARN, t: t, tools: Find(t), ex: ex}
	s.args = checkOverrides(t, ex)
	srv := httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		s.mu.Lock()
		for _, e := range s.execs {
			e.stop()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

// ExecutionARN is the ARN of this state machine's execution name.
func (s *Server) ExecutionARN(name string) string {
	return strings.Replace(s.StateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}

// ExecutionResult is how an execution ended.
type ExecutionResult struct {
	Name   string
	Input  string
	Status string
	Output json.RawMessage // when SUCCEEDED
	Cause  string          // when FAILED: local-sfn's error message
}

// Wait waits for the execution name to end and returns how it did.
func (s *Server) Wait(t testing.TB, name string) ExecutionResult {
	t.Helper()
	e := s.find(t, name)
	select {
	case <-e.done:
	case <-t.Context().Done():
		t.Fatalf("sfntest: execution %s did not end before the test", name)
	}
	return s.Describe(t, name)
}

// Describe returns the execution name as it is now.
func (s *Server) Describe(t testing.TB, name string) ExecutionResult {
	t.Helper()
	e := s.find(t, name)
	s.mu.Lock()
	defer s.mu.Unlock()
	return ExecutionResult{Name: e.name, Input: e.input, Status: e.status, Output: e.output, Cause: e.cause}
}

// Stop stops the execution name, as StopExecution does, and returns it.
func (s *Server) Stop(t testing.TB, name string) ExecutionResult {
	t.Helper()
	e := s.find(t, name)
	e.stop()
	return s.Wait(t, name)
}

// Names returns the names of the executions started, in order.
func (s *Server) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var names []string
	for _, e := range s.execs {
		names = append(names, e.name)
	}
	return names
}

func (s *Server) find(t testing.TB, name string) *serverExecution {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.execs {
		if e.name == name {
			return e
		}
	}
	t.Fatalf("sfntest: no execution %s", name)
	return nil
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil || r.Method != http.MethodPost {
		apiError(w, http.StatusBadRequest, "InvalidRequest", "a POST with a body is expected")
		return
	}
	var status int
	var out any
	switch op := r.Header.Get("X-Amz-Target"); op {
	case "AWSStepFunctions.StartExecution":
		status, out = s.start(body)
	case "AWSStepFunctions.DescribeExecution":
		status, out = s.describe(body)
	case "AWSStepFunctions.StopExecution":
		status, out = s.stopExecution(body)
	default:
		status, out = http.StatusBadRequest, awsError{"UnknownOperationException", "sfntest does not serve " + op}
	}
	if e, ok := out.(awsError); ok {
		apiError(w, status, e.code, e.message)
		return
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(out)
}

type awsError struct{ code, message string }

func apiError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": message})
}

func epoch(t time.Time) float64 { return float64(t.UnixMilli()) / 1000 }

func (s *Server) start(body []byte) (int, any) {
	var in struct {
		StateMachineArn string `json:"stateMachineArn"`
		Name            string `json:"name"`
		Input           string `json:"input"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return http.StatusBadRequest, awsError{"SerializationException", err.Error()}
	}
	switch {
	case in.StateMachineArn != s.StateMachineARN:
		return http.StatusBadRequest, awsError{"StateMachineDoesNotExist", "State Machine Does Not Exist: '" + in.StateMachineArn + "'"}
	case !executionName.MatchString(in.Name):
		return http.StatusBadRequest, awsError{"InvalidName", "Invalid Name: '" + in.Name + "'"}
	case !json.Valid([]byte(in.Input)):
		return http.StatusBadRequest, awsError{"InvalidExecutionInput", "Invalid Execution Input: not JSON"}
	}
	arn := s.ExecutionARN(in.Name)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.execs {
		if e.name != in.Name {
			continue
		}
		select {
		case <-e.done:
		default:
			if e.input == in.Input {
				return http.StatusOK, map[string]any{"executionArn": arn, "startDate": epoch(e.started)}
			}
		}
		return http.StatusBadRequest, awsError{"ExecutionAlreadyExists", "Execution Already Exists: '" + arn + "'"}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &serverExecution{name: in.Name, input: in.Input, started: time.Now(), stop: cancel, done: make(chan struct{}), status: StatusRunning}
	s.execs = append(s.execs, e)
	ex := s.ex
	ex.Input = []byte(in.Input)
	dir, err := os.MkdirTemp("", "sfntest-execution-*")
	if err != nil {
		return http.StatusInternalServerError, awsError{"InternalError", err.Error()}
	}
	s.wg.Go(func() {
		defer os.RemoveAll(dir)
		out, stderr, err := s.tools.execute(ctx, ex, s.args, dir)
		s.mu.Lock()
		defer s.mu.Unlock()
		var failed *ExecutionError
		switch {
		case err == nil:
			e.status, e.output = StatusSucceeded, out
		case errors.As(err, &failed):
			e.status, e.cause = StatusFailed, failed.Message
		case errors.Is(err, errAborted):
			e.status = StatusAborted
		default:
			// local-sfn could not run it, or it ran past ex.Timeout: as
			// the service, the execution ends; the test learns why.
			e.status, e.cause = StatusTimedOut, err.Error()
			s.t.Errorf("sfntest: execution %s: %v\n%s", e.name, err, stderr)
		}
		e.stopped = time.Now()
		close(e.done)
	})
	return http.StatusOK, map[string]any{"executionArn": arn, "startDate": epoch(e.started)}
}

func (s *Server) execution(body []byte) (*serverExecution, string, awsError, bool) {
	var in struct {
		ExecutionArn string `json:"executionArn"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, "", awsError{"SerializationException", err.Error()}, false
	}
	for _, e := range s.execs {
		if s.ExecutionARN(e.name) == in.ExecutionArn {
			return e, in.ExecutionArn, awsError{}, true
		}
	}
	return nil, in.ExecutionArn, awsError{"ExecutionDoesNotExist", "Execution Does Not Exist: '" + in.ExecutionArn + "'"}, false
}

func (s *Server) describe(body []byte) (int, any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, arn, notFound, ok := s.execution(body)
	if !ok {
		return http.StatusBadRequest, notFound
	}
	out := map[string]any{
		"executionArn": arn, "stateMachineArn": s.StateMachineARN, "name": e.name,
		"status": e.status, "startDate": epoch(e.started), "input": e.input,
	}
	if e.status != StatusRunning {
		out["stopDate"] = epoch(e.stopped)
	}
	if e.output != nil {
		out["output"] = string(e.output)
	}
	if e.cause != "" {
		out["error"], out["cause"] = "States.ExecutionFailed", e.cause
	}
	return http.StatusOK, out
}

func (s *Server) stopExecution(body []byte) (int, any) {
	s.mu.Lock()
	e, _, notFound, ok := s.execution(body)
	s.mu.Unlock()
	if !ok {
		return http.StatusBadRequest, notFound
	}
	e.stop()
	<-e.done
	return http.StatusOK, map[string]any{"stopDate": epoch(e.stopped)}
}

// paceStates is how the names of the retry workflow's pace waits begin
// (statemachine.PaceState; the statemachine package's test holds them to it).
const paceStates = "Pace"

// RetryWorkflow is the deployed retry workflow, statemachine/retry.asl.json
// (read from the repository, with attemptARN substituted), as an Execution
// without input: every attempt task and the abandon task run the attempt
// program (package sfntest/attempt, built here) over the DynamoDB table at
// endpoint, every Wait state but the pace's (statemachine.PaceState) pauses
// wait (AsDefined: until the time it reads), and a failed task is retried
// after 10 ms. env adds to the program's environment.
func RetryWorkflow(t testing.TB, attemptARN, table, endpoint string, wait time.Duration, env ...string) Execution {
	t.Helper()
	root := Find(t).Root
	raw, err := os.ReadFile(filepath.Join(root, "statemachine", "retry.asl.json"))
	if err != nil {
		t.Fatal(err)
	}
	def := Substitute(t, raw, map[string]string{"AttemptFunctionArn": attemptARN})
	states, err := stateTypes(def)
	if err != nil {
		t.Fatal(err)
	}
	bin := Build(t, "github.com/tally-hq/tally/internal/sfntest/attempt")
	ex := Execution{Definition: def, Tasks: map[string]string{}, Waits: map[string]time.Duration{}, Retries: map[string]time.Duration{}}
	for name, typ := range states {
		switch typ {
		case "Task":
			ex.Tasks[name], ex.Retries[name] = bin, 10*time.Millisecond
		case "Wait":
			ex.Waits[name] = wait
			if strings.HasPrefix(name, paceStates) {
				// A paced attempt's wait is its endpoint's pace: shortened,
				// it would only ask again sooner to be refused again.
				ex.Waits[name] = AsDefined
			}
		}
	}
	ex.Env = append([]string{
		"TALLY_TABLE=" + table,
		"AWS_ENDPOINT_URL_DYNAMODB=" + endpoint,
		"AWS_ENDPOINT_URL=",
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=tally",
		"AWS_SECRET_ACCESS_KEY=tally",
		"AWS_SESSION_TOKEN=",
		"AWS_PROFILE=",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
		"AWS_EC2_METADATA_DISABLED=true",
		"TALLY_LOG_LEVEL=warn",
	}, env...)
	return ex
}

// String describes an execution's end for test messages.
func (r ExecutionResult) String() string {
	if r.Status == StatusSucceeded {
		return fmt.Sprintf("%s %s: %s", r.Name, r.Status, r.Output)
	}
	return fmt.Sprintf("%s %s: %s", r.Name, r.Status, r.Cause)
}
