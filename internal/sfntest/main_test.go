package sfntest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/statemachine"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/tracking"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// The tests run the real steps of the webhook pipeline against one
// DynamoDB Local table each: the handlers of lambdafn in the test process,
// the state machine's task in a program local-sfn starts.
const (
	attemptPkg      = "github.com/tally-hq/tally/internal/sfntest/attempt"
	attemptARN      = "arn:aws:lambda:us-east-1:123456789012:function:tally-AttemptFunction"
	stateMachineARN = "arn:aws:states:us-east-1:123456789012:stateMachine:tally-RetryStateMachine"
	queueURL        = "https://sqs.us-east-1.amazonaws.com/123456789012/tally-DeliveryQueue"

	// waitTime replaces every Wait state's time (1 s … 2 h): short, but
	// still a real pause between attempts.
	waitTime = 20 * time.Millisecond
)

// fixture is one brand in a fresh table.
type fixture struct {
	endpoint string
	client   *dynamodb.Client
	table    string
	svc      *tracking.Service // set-up; accepts loopback receivers
	log      *slog.Logger
	brand    tally.Brand
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{endpoint: dynamotest.Endpoint(t), log: slog.New(slog.NewTextHandler(testWriter{t}, nil))}
	f.client, f.table = dynamotest.NewTable(t)
	f.svc = tracking.New(dynamo.New(f.client, f.table), tracking.WithLoopbackReceivers())
	var err error
	if f.brand, err = f.svc.CreateBrand(t.Context(), "Northwind Running"); err != nil {
		t.Fatal(err)
	}
	return f
}

// function returns the service of another function over the same table:
// each Lambda function has its own (and its own caches).
func (f *fixture) function() *tracking.Service { return tracking.New(dynamo.New(f.client, f.table)) }

func (f *fixture) subscribe(t *testing.T, url, secret string, events ...string) tally.Subscription {
	t.Helper()
	sub, err := f.svc.CreateSubscription(t.Context(), f.brand.ID, tracking.SubscriptionInput{URL: &url, Events: events, Secret: &secret})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}

// loopbackSender is the deliver function's sender, except that it reaches
// the tests' receivers on 127.0.0.1.
func loopbackSender() *delivery.Sender {
	return delivery.NewSender(delivery.Options{AllowLoopback: true})
}

// deliver runs the deliver function on queue messages (attempt 1) and
// returns the executions it started.
func (f *fixture) deliver(t *testing.T, msgs ...events.SQSMessage) []*sfn.StartExecutionInput {
	t.Helper()
	ex := &executions{}
	h := lambdafn.DeliverHandler(f.function(), loopbackSender(), ex, stateMachineARN, f.log)
	resp, err := h(lambdaContext(t.Context(), "deliver"), roundTrip(t, events.SQSEvent{Records: msgs}))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("deliver: %v, failures %+v", err, resp.BatchItemFailures)
	}
	return ex.take()
}

// message is the queue message the fan-out sends for ref.
func message(t *testing.T, id string, ref tracking.DeliveryRef) events.SQSMessage {
	t.Helper()
	body, err := json.Marshal(ref)
	if err != nil {
		t.Fatal(err)
	}
	return events.SQSMessage{MessageId: id, Body: string(body), EventSource: "aws:sqs", AWSRegion: "us-east-1",
		EventSourceARN: "arn:aws:sqs:us-east-1:123456789012:tally-DeliveryQueue"}
}

// taskRun is one run of the attempt program, as it logs it.
type taskRun struct {
	Payload lambdafn.RetryInput    `json:"payload"`
	Result  tracking.AttemptResult `json:"result"`
	Error   string                 `json:"error"`
}

// retry runs the retry state machine, statemachine/retry.asl.json, on the
// input of a captured StartExecution: every Attempt task runs the attempt
// program over the fixture's table, every Wait state waits waitTime.
func (f *fixture) retry(t *testing.T, start *sfn.StartExecutionInput) (json.RawMessage, []taskRun, error) {
	t.Helper()
	bin := sfntest.Build(t, attemptPkg)
	raw, err := os.ReadFile(filepath.Join("..", "..", statemachine.File))
	if err != nil {
		t.Fatal(err)
	}
	ex := sfntest.Execution{
		Definition: sfntest.Substitute(t, raw, map[string]string{statemachine.AttemptFunctionVar: attemptARN}),
		Input:      []byte(aws.ToString(start.Input)),
		Tasks:      map[string]string{},
		Waits:      map[string]time.Duration{},
		Retries:    map[string]time.Duration{},
	}
	for retry := 1; retry <= len(tracking.RetrySchedule); retry++ {
		ex.Waits[statemachine.WaitState(retry)] = waitTime
		task := statemachine.AttemptState(retry + 1)
		ex.Tasks[task] = bin
		ex.Retries[task] = 10 * time.Millisecond // a failed task is retried, but not after 2 s, 4 s, …
	}
	taskLog := filepath.Join(t.TempDir(), "tasks.jsonl")
	ex.Env = []string{
		"TALLY_TABLE=" + f.table,
		"AWS_ENDPOINT_URL_DYNAMODB=" + f.endpoint,
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
		"SFNTEST_TASK_LOG=" + taskLog,
	}
	started := time.Now()
	out, runErr := sfntest.Run(t, ex)
	t.Logf("local-sfn ran the execution in %v", time.Since(started).Round(time.Millisecond))
	return out, readTaskLog(t, taskLog), runErr
}

func readTaskLog(t *testing.T, path string) []taskRun {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var runs []taskRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r taskRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("task log: %v: %s", err, sc.Text())
		}
		runs = append(runs, r)
	}
	return runs
}

// executionOutput is what the retry workflow ends with: its input plus the
// last attempt's result.
type executionOutput struct {
	BrandID    string `json:"brandId"`
	DeliveryID string `json:"deliveryId"`
	Result     struct {
		Status   string `json:"status"`
		Attempts int    `json:"attempts"`
	} `json:"result"`
}

// executions stands in for Step Functions: it records the executions the
// deliver function starts.
type executions struct {
	mu      sync.Mutex
	started []*sfn.StartExecutionInput
}

func (e *executions) StartExecution(_ context.Context, in *sfn.StartExecutionInput, _ ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.started = append(e.started, in)
	arn := strings.Replace(aws.ToString(in.StateMachineArn), ":stateMachine:", ":execution:", 1) + ":" + aws.ToString(in.Name)
	return &sfn.StartExecutionOutput{ExecutionArn: aws.String(arn), StartDate: aws.Time(time.Now())}, nil
}

func (e *executions) take() []*sfn.StartExecutionInput {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.started
	e.started = nil
	return out
}

// receiver is a webhook receiver on 127.0.0.1 that answers request n
// (from 1) with status(n).
type receiver struct {
	*httptest.Server
	status func(n int) int

	mu   sync.Mutex
	reqs []request
}

type request struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, status func(n int) int) *receiver {
	r := &receiver{status: status}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, request{header: req.Header.Clone(), body: body})
		n := len(r.reqs)
		r.mu.Unlock()
		w.WriteHeader(r.status(n))
		fmt.Fprintf(w, "request %d", n)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) requests() []request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]request(nil), r.reqs...)
}

// lambdaContext is the context the Lambda runtime gives a handler.
func lambdaContext(ctx context.Context, function string) context.Context {
	return lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{
		AwsRequestID:       "5c1f0e52-7f1b-4d2f-9a55-0c1d2e3f4a5b",
		InvokedFunctionArn: "arn:aws:lambda:us-east-1:123456789012:function:tally-" + function,
	})
}

// roundTrip passes an event through JSON, as the Lambda runtime does.
func roundTrip[T any](t *testing.T, ev T) T {
	t.Helper()
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var out T
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// testWriter sends the handlers' log lines to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
