package sfntest_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
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
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/lambdafn/deliver"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/webhooks"
)

func TestMain(m *testing.M) { sqstest.Main(m) }

// The tests run the real steps of the webhook pipeline against one
// DynamoDB Local table each: the handlers of lambdafn in the test process,
// with the SDK's Step Functions client talking to an sfntest.Server (the
// API is its stand-in; each execution runs in local-sfn), whose tasks run
// the attempt program over the same table.
const (
	attemptARN      = "arn:aws:lambda:us-east-1:123456789012:function:tally-AttemptFunction"
	stateMachineARN = "arn:aws:states:us-east-1:123456789012:stateMachine:tally-RetryStateMachine"

	// waitTime replaces every Wait state's time (1 s … 2 h): short, but
	// still a real pause between attempts.
	waitTime = 20 * time.Millisecond
)

// fixture is one brand in a fresh table, with the retry workflow served.
type fixture struct {
	endpoint string
	client   *dynamodb.Client
	table    string
	svc      *service.Service // set-up; accepts loopback receivers
	log      *slog.Logger
	brand    tally.Brand

	workflow *sfntest.Server
	sfn      *sfn.Client // the deliver function's client, at workflow
	taskLog  string      // the attempt program's runs (SFNTEST_TASK_LOG)
	failFile string      // runs the attempt program fails on purpose (SFNTEST_FAIL_FILE)
	// later is where deliver queues paced messages again: nowhere, unless
	// the test has a queue (newPipeline).
	later deliver.Requeue
}

func newFixture(t *testing.T) *fixture { return newFixtureWaiting(t, waitTime) }

// newFixtureWaiting is newFixture with every Wait state's time set to wait.
func newFixtureWaiting(t *testing.T, wait time.Duration) *fixture {
	t.Helper()
	f := &fixture{endpoint: dynamotest.Endpoint(t), log: slog.New(slog.NewTextHandler(testWriter{t}, nil)), later: noQueue}
	f.client, f.table = dynamotest.NewTable(t)
	f.svc = servicetest.New(dynamo.New(f.client, f.table), service.WithLoopbackReceivers())
	var err error
	if f.brand, err = f.svc.Identity.CreateBrand(t.Context(), "Northwind Running"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f.taskLog, f.failFile = filepath.Join(dir, "tasks.jsonl"), filepath.Join(dir, "fail")
	f.workflow = sfntest.NewServer(t, stateMachineARN, sfntest.RetryWorkflow(t, attemptARN, f.table, f.endpoint, wait,
		"SFNTEST_TASK_LOG="+f.taskLog, "SFNTEST_FAIL_FILE="+f.failFile))
	f.sfn = sfn.New(sfn.Options{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("tally", "tally", ""),
		BaseEndpoint: aws.String(f.workflow.URL),
	})
	return f
}

// noQueue is the fixture's deliver.Requeue when the test has no queue.
func noQueue(context.Context, webhooks.DeliveryMessage, time.Duration) error {
	return errors.New("no queue to put a paced delivery back in")
}

// failOnPurpose makes the attempt program fail the runs listed ("3",
// "abandon"), from its next run on.
func (f *fixture) failOnPurpose(t *testing.T, runs ...string) {
	t.Helper()
	if err := os.WriteFile(f.failFile, []byte(strings.Join(runs, ",")), 0o644); err != nil {
		t.Fatal(err)
	}
}

// function returns the service of another function over the same table:
// each Lambda function has its own (and its own caches).
func (f *fixture) function() *service.Service {
	return servicetest.New(dynamo.New(f.client, f.table), service.OnAWS())
}

func (f *fixture) subscribe(t *testing.T, url, secret string, events ...string) tally.Subscription {
	t.Helper()
	sub, err := f.svc.Endpoints.CreateSubscription(t.Context(), f.brand.ID, endpoints.SubscriptionInput{URL: &url, Events: events, Secret: &secret})
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

// deliver runs the deliver function on queue messages (attempt 1; its
// client starts the retry executions) and returns the names of the
// executions started since the last call.
func (f *fixture) deliver(t *testing.T, msgs ...events.SQSMessage) []string {
	t.Helper()
	before := len(f.workflow.Names())
	h := deliver.DeliverHandler(f.function().Webhooks, loopbackSender(), f.sfn, stateMachineARN, f.later, f.log)
	resp, err := h(lambdaContext(t.Context(), "deliver"), roundTrip(t, events.SQSEvent{Records: msgs}))
	if err != nil || len(resp.BatchItemFailures) > 0 {
		t.Fatalf("deliver: %v, failures %+v", err, resp.BatchItemFailures)
	}
	return f.workflow.Names()[before:]
}

// message is the queue message the fan-out sends for ref.
func message(t *testing.T, id string, ref endpoints.DeliveryRef) events.SQSMessage {
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
	Payload attempt.RetryInput     `json:"payload"`
	Result  webhooks.AttemptResult `json:"result"`
	Error   string                 `json:"error"`
}

// taskRuns returns the attempt program's runs so far.
func (f *fixture) taskRuns(t *testing.T) []taskRun {
	t.Helper()
	file, err := os.Open(f.taskLog)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	var runs []taskRun
	sc := bufio.NewScanner(file)
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

// receiver is a webhook receiver on 127.0.0.1 that answers request n
// (from 1) with status(n).
type receiver struct {
	*httptest.Server
	status func(n int) int
	header func(n int) http.Header // added to answer n, when set

	mu     sync.Mutex
	reqs   []request
	answer []byte // the body of every answer; nil: "request N"
}

type request struct {
	method, uri string
	header      http.Header
	body        []byte
	status      int // the answer
	at          time.Time
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
		n := len(r.reqs) + 1
		status := r.status(n)
		r.reqs = append(r.reqs, request{method: req.Method, uri: req.URL.RequestURI(), header: req.Header.Clone(), body: body, status: status, at: time.Now()})
		answer, header := r.answer, r.header
		r.mu.Unlock()
		if header != nil {
			maps.Copy(w.Header(), header(n))
		}
		w.WriteHeader(status)
		if answer != nil {
			w.Write(answer)
			return
		}
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
