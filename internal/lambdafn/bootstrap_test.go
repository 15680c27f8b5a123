//go:build linux

package lambdafn_test

// TestBootstrap runs each function as Lambda runs it: the bootstrap binary
// that `make build` makes, started as a process that talks to the Lambda
// Runtime API (a stand-in served here on loopback), with its environment as
// docs/aws.md lays it out. The table is DynamoDB Local; SQS and Step
// Functions are tiny fakes of their JSON APIs on loopback (the SDK's
// AWS JSON 1.0 protocol, reached through AWS_ENDPOINT_URL_SQS and
// AWS_ENDPOINT_URL_SFN), since no emulator for them runs on these machines.
//
// `make build` makes linux/arm64 binaries, which cannot run on this amd64
// machine, so the test builds the same way (CGO_ENABLED=0, -tags
// lambda.norpc, -trimpath, -ldflags='-s -w') for the host's architecture
// into a temporary folder. It logs each binary's size (and that of the arm64
// bin/<fn>/bootstrap, when `make build` was run) and its init time: from the
// process's start to its first call for the next invocation.

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/tracking"
)

// bootstrapBudget bounds the whole test, builds included.
const bootstrapBudget = 60 * time.Second

// invokeTimeout is the deadline each invocation gets (the API functions'
// timeout in docs/aws.md).
const invokeTimeout = 10 * time.Second

// buildBootstraps builds every function like `make build`, for the host's
// architecture, and returns the bootstrap of each by function name.
func buildBootstraps(ctx context.Context, t *testing.T, fns []function) map[string]string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to build the functions with")
	}
	out := t.TempDir()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goTool, "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w", "-o", out+"/", "./functions/...")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, msg)
	}
	t.Logf("built %d functions for linux/%s in %v", len(fns), runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	bins := map[string]string{}
	for _, fn := range fns {
		dir := filepath.Join(out, fn.name+".d")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bins[fn.name] = filepath.Join(dir, "bootstrap")
		if err := os.Rename(filepath.Join(out, fn.name), bins[fn.name]); err != nil {
			t.Fatal(err)
		}
	}
	return bins
}

// runtimeAPI is a stand-in for the Lambda Runtime API of one execution
// environment: the function polls it for invocations and posts their
// results (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html).
type runtimeAPI struct {
	srv       *httptest.Server
	arn       string
	pending   chan *invocation
	mu        sync.Mutex
	inflight  map[string]*invocation
	firstNext chan time.Time // when the first GET …/next came
	initError chan []byte
}

type invocation struct {
	id      string
	payload []byte
	done    chan invocationResult
}

type invocationResult struct {
	body      []byte
	errorType string // set when the function posted …/error
}

func newRuntimeAPI(t *testing.T, functionName string) *runtimeAPI {
	a := &runtimeAPI{
		arn:       "arn:aws:lambda:us-east-1:123456789012:function:" + functionName,
		pending:   make(chan *invocation),
		inflight:  map[string]*invocation{},
		firstNext: make(chan time.Time, 1),
		initError: make(chan []byte, 1),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /2018-06-01/runtime/invocation/next", func(w http.ResponseWriter, r *http.Request) {
		select {
		case a.firstNext <- time.Now():
		default:
		}
		select {
		case inv := <-a.pending:
			h := w.Header()
			h.Set("Content-Type", "application/json")
			h.Set("Lambda-Runtime-Aws-Request-Id", inv.id)
			h.Set("Lambda-Runtime-Deadline-Ms", strconv.FormatInt(time.Now().Add(invokeTimeout).UnixMilli(), 10))
			h.Set("Lambda-Runtime-Invoked-Function-Arn", a.arn)
			h.Set("Lambda-Runtime-Trace-Id", "Root=1-6b02be13-e74ddbb06373e9c21b45b76b;Parent=53995c3f42cd8ad8;Sampled=0")
			w.Write(inv.payload)
		case <-r.Context().Done():
		}
	})
	finish := func(w http.ResponseWriter, r *http.Request, errorType string) {
		body, _ := io.ReadAll(r.Body)
		a.mu.Lock()
		inv := a.inflight[r.PathValue("id")]
		delete(a.inflight, r.PathValue("id"))
		a.mu.Unlock()
		if inv == nil {
			http.Error(w, `{"errorMessage":"unknown request id","errorType":"InvalidRequestID"}`, http.StatusBadRequest)
			return
		}
		inv.done <- invocationResult{body: body, errorType: errorType}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"status":"OK"}`)
	}
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/response", func(w http.ResponseWriter, r *http.Request) {
		finish(w, r, "")
	})
	mux.HandleFunc("POST /2018-06-01/runtime/invocation/{id}/error", func(w http.ResponseWriter, r *http.Request) {
		finish(w, r, orDefault(r.Header.Get("Lambda-Runtime-Function-Error-Type"), "Unhandled"))
	})
	mux.HandleFunc("POST /2018-06-01/runtime/init/error", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select {
		case a.initError <- body:
		default:
		}
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"status":"OK"}`)
	})
	a.srv = httptest.NewServer(mux)
	t.Cleanup(a.srv.Close)
	return a
}

func orDefault(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// lambdaProcess is a function's bootstrap running against its runtimeAPI.
type lambdaProcess struct {
	budget  context.Context // the test's time limit
	name    string
	api     *runtimeAPI
	started time.Time
	exited  chan struct{}
	exitErr error
	logs    *lineLog
	initDur time.Duration
}

// startFunction starts bin with env and the runtime API's address; budget
// bounds every wait on it.
func startFunction(t *testing.T, budget context.Context, name, bin string, env []string) *lambdaProcess {
	t.Helper()
	p := &lambdaProcess{budget: budget, name: name, api: newRuntimeAPI(t, "tally-"+name), exited: make(chan struct{}), logs: &lineLog{}}
	cmd := exec.Command(bin)
	cmd.Dir = filepath.Dir(bin)
	cmd.Env = append(slices.Clone(env),
		"AWS_LAMBDA_RUNTIME_API="+strings.TrimPrefix(p.api.srv.URL, "http://"),
		"AWS_LAMBDA_FUNCTION_NAME=tally-"+name,
		"AWS_LAMBDA_LOG_STREAM_NAME=2026/11/22/[$LATEST]0f5e8d2c4b7a4e19a3c6d8f1b2e4a7c9",
		"AWS_LAMBDA_LOG_GROUP_NAME=/aws/lambda/tally-"+name,
		"LAMBDA_TASK_ROOT="+cmd.Dir)
	cmd.Stdout, cmd.Stderr = p.logs, p.logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // if the test binary dies first
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exitErr = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill() // this test's own child, by its pid
		<-p.exited
	})
	return p
}

// waitInit waits for the function's first call for an invocation.
func (p *lambdaProcess) waitInit(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case at := <-p.api.firstNext:
		p.initDur = at.Sub(p.started)
	case <-p.exited:
		t.Fatalf("functions/%s exited during init (%v); its log:\n%s", p.name, p.exitErr, p.logs.text())
	case <-time.After(timeout):
		t.Fatalf("functions/%s did not ask for an invocation within %v; its log:\n%s", p.name, timeout, p.logs.text())
	case <-p.budget.Done():
		t.Fatalf("out of time (%v) waiting for functions/%s to start", bootstrapBudget, p.name)
	}
}

// invoke runs one invocation with payload and returns what the function
// posted.
func (p *lambdaProcess) invoke(t *testing.T, payload []byte) (invocationResult, string) {
	t.Helper()
	inv := &invocation{id: newRequestID(), payload: payload, done: make(chan invocationResult, 1)}
	p.api.mu.Lock()
	p.api.inflight[inv.id] = inv
	p.api.mu.Unlock()
	timeout := time.After(invokeTimeout + 5*time.Second)
	select {
	case p.api.pending <- inv:
	case <-p.exited:
		t.Fatalf("functions/%s has exited (%v); its log:\n%s", p.name, p.exitErr, p.logs.text())
	case <-timeout:
		t.Fatalf("functions/%s did not take the invocation", p.name)
	case <-p.budget.Done():
		t.Fatalf("out of time (%v)", bootstrapBudget)
	}
	select {
	case res := <-inv.done:
		return res, inv.id
	case <-p.exited:
		t.Fatalf("functions/%s exited during an invocation (%v); its log:\n%s", p.name, p.exitErr, p.logs.text())
	case <-timeout:
		t.Fatalf("functions/%s did not answer within %v", p.name, invokeTimeout)
	case <-p.budget.Done():
		t.Fatalf("out of time (%v) waiting for functions/%s", bootstrapBudget, p.name)
	}
	return invocationResult{}, ""
}

// invokeOK runs an invocation that must succeed and decodes its answer.
func invokeOK[Out any](t *testing.T, p *lambdaProcess, payload []byte) Out {
	t.Helper()
	res, _ := p.invoke(t, payload)
	if res.errorType != "" {
		t.Fatalf("functions/%s answered an error (%s): %s", p.name, res.errorType, res.body)
	}
	var out Out
	if err := json.Unmarshal(res.body, &out); err != nil {
		t.Fatalf("functions/%s answered %s: %v", p.name, res.body, err)
	}
	return out
}

func newRequestID() string {
	b := make([]byte, 16)
	rand.Read(b)
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// lineLog keeps a process's output, line by line; JSON lines (the
// functions' slog records) are also kept decoded.
type lineLog struct {
	mu      sync.Mutex
	partial []byte
	lines   []string
	records []map[string]any
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.partial[:i])
		l.partial = l.partial[i+1:]
		l.lines = append(l.lines, line)
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			l.records = append(l.records, rec)
		}
	}
}

func (l *lineLog) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n") + string(l.partial)
}

// of returns the records of one invocation, waiting (briefly) for one whose
// msg is want: the process writes them before it answers, but they travel
// through a pipe.
func (l *lineLog) of(requestID, want string) []map[string]any {
	deadline := time.Now().Add(2 * time.Second)
	for {
		l.mu.Lock()
		var out []map[string]any
		found := false
		for _, r := range l.records {
			if r["awsRequestId"] == requestID {
				out = append(out, r)
				found = found || r["msg"] == want
			}
		}
		l.mu.Unlock()
		if found || time.Now().After(deadline) {
			return out
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// awsJSONServer serves one AWS JSON 1.0 API (X-Amz-Target names the
// operation) on loopback. It answers only the operations in ops.
func awsJSONServer(t *testing.T, ops map[string]func(body []byte) (status int, out any)) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amzn-RequestId", newRequestID())
		op, ok := ops[r.Header.Get("X-Amz-Target")]
		if r.Method != http.MethodPost || !ok {
			awsError(w, http.StatusBadRequest, "UnknownOperationException", "not served by this fake: "+r.Header.Get("X-Amz-Target"))
			return
		}
		status, out := op(body)
		if e, ok := out.(awsErr); ok {
			awsError(w, status, e.code, e.message)
			return
		}
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	return srv
}

type awsErr struct{ code, message string }

func awsError(w http.ResponseWriter, status int, code, message string) {
	w.Header().Set("X-Amzn-ErrorType", code)
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"__type": code, "message": message})
}

// sqsAPI is a fake of SQS's SendMessageBatch, for one queue.
type sqsAPI struct {
	srv      *httptest.Server
	queueURL string
	mu       sync.Mutex
	sent     []string // accepted bodies
	calls    int
	refuse   int // answer the next n calls with every entry failed
}

func newSQSAPI(t *testing.T) *sqsAPI {
	q := &sqsAPI{}
	q.srv = awsJSONServer(t, map[string]func([]byte) (int, any){
		"AmazonSQS.SendMessageBatch": func(body []byte) (int, any) {
			var in struct {
				QueueURL string `json:"QueueUrl"`
				Entries  []struct{ Id, MessageBody string }
			}
			if err := json.Unmarshal(body, &in); err != nil {
				return 400, awsErr{"InvalidParameterValue", err.Error()}
			}
			q.mu.Lock()
			defer q.mu.Unlock()
			q.calls++
			switch {
			case in.QueueURL != q.queueURL:
				return 400, awsErr{"QueueDoesNotExist", "The specified queue does not exist: " + in.QueueURL}
			case len(in.Entries) == 0 || len(in.Entries) > 10:
				return 400, awsErr{"TooManyEntriesInBatchRequest", "1 to 10 entries"}
			}
			type ok struct{ Id, MessageId, MD5OfMessageBody string }
			type failed struct {
				Id, Code, Message string
				SenderFault       bool
			}
			out := struct {
				Successful []ok     `json:",omitempty"`
				Failed     []failed `json:",omitempty"`
			}{}
			for _, e := range in.Entries {
				if q.refuse > 0 {
					out.Failed = append(out.Failed, failed{Id: e.Id, Code: "InternalError", Message: "Try again."})
					continue
				}
				sum := md5.Sum([]byte(e.MessageBody)) // the SDK checks it
				out.Successful = append(out.Successful, ok{Id: e.Id, MessageId: newRequestID(), MD5OfMessageBody: hex.EncodeToString(sum[:])})
				q.sent = append(q.sent, e.MessageBody)
			}
			if q.refuse > 0 {
				q.refuse--
			}
			return 200, out
		},
	})
	q.queueURL = q.srv.URL + "/123456789012/tally-DeliveryQueue"
	return q
}

func (q *sqsAPI) messages() []string {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.sent)
}

// sfnAPI is a fake of Step Functions' StartExecution with the semantics of
// a STANDARD state machine (see fakeExecutions).
type sfnAPI struct {
	srv     *httptest.Server
	mu      sync.Mutex
	started []sfnStart
	running map[string]bool
	refused int
}

type sfnStart struct{ StateMachineArn, Name, Input string }

func newSFNAPI(t *testing.T) *sfnAPI {
	x := &sfnAPI{running: map[string]bool{}}
	x.srv = awsJSONServer(t, map[string]func([]byte) (int, any){
		"AWSStepFunctions.StartExecution": func(body []byte) (int, any) {
			var in struct {
				StateMachineArn string `json:"stateMachineArn"`
				Name            string `json:"name"`
				Input           string `json:"input"`
			}
			if err := json.Unmarshal(body, &in); err != nil || !strings.HasPrefix(in.StateMachineArn, "arn:aws:states:") {
				return 400, awsErr{"InvalidArn", "Invalid Arn: " + in.StateMachineArn}
			}
			if !executionName.MatchString(in.Name) {
				return 400, awsErr{"InvalidName", "Invalid Name: " + in.Name}
			}
			x.mu.Lock()
			defer x.mu.Unlock()
			arn := strings.Replace(in.StateMachineArn, ":stateMachine:", ":execution:", 1) + ":" + in.Name
			out := map[string]any{"executionArn": arn, "startDate": float64(time.Now().UnixMilli()) / 1000}
			for _, s := range x.started {
				if s.Name == in.Name {
					if x.running[in.Name] && s.Input == in.Input {
						return 200, out
					}
					x.refused++
					return 400, awsErr{"ExecutionAlreadyExists", "Execution Already Exists: '" + arn + "'"}
				}
			}
			x.started = append(x.started, sfnStart{in.StateMachineArn, in.Name, in.Input})
			x.running[in.Name] = true
			return 200, out
		},
	})
	return x
}

func (x *sfnAPI) names() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var out []string
	for _, s := range x.started {
		out = append(out, s.Name)
	}
	return out
}

func TestBootstrap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every function's binary")
	}
	begin := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), bootstrapBudget)
	defer cancel()
	fns := functions(t)
	all := samples(t)
	bins := buildBootstraps(ctx, t, fns)

	client, table := dynamotest.NewTable(t)
	st := dynamo.New(client, table)
	queue, executions := newSQSAPI(t), newSFNAPI(t)
	const smARN = "arn:aws:states:us-east-1:123456789012:stateMachine:RetryStateMachine-Vb3Xy9Qw1Ert"
	home := t.TempDir()
	base := []string{
		"TALLY_TABLE=" + table,
		"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=tally", "AWS_SECRET_ACCESS_KEY=tally", "AWS_SESSION_TOKEN=tally",
		"AWS_CONFIG_FILE=" + filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynamotest.Endpoint(t),
		"AWS_ENDPOINT_URL_SQS=" + queue.srv.URL,
		"AWS_ENDPOINT_URL_SFN=" + executions.srv.URL,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_EXECUTION_ENV=AWS_Lambda_provided.al2023", "_HANDLER=bootstrap", "TZ=:UTC",
	}
	// The environment of each function, per docs/aws.md.
	envOf := func(fn function) []string {
		env := slices.Clone(base)
		if fn.kind == kindFanout || fn.name == "deliveries" {
			env = append(env, "TALLY_DELIVERY_QUEUE_URL="+queue.queueURL)
		}
		if fn.kind == kindDeliver {
			env = append(env, "TALLY_RETRY_STATE_MACHINE_ARN="+smARN)
		}
		if fn.isFallback() {
			// It has no table permission on AWS (TALLY_TABLE is set all
			// the same): here a call to the table would fail, and the
			// answer with it.
			for i, kv := range env {
				if strings.HasPrefix(kv, "AWS_ENDPOINT_URL_DYNAMODB=") {
					env[i] = "AWS_ENDPOINT_URL_DYNAMODB=http://127.0.0.1:1"
				}
			}
		}
		return env
	}

	// One at a time, so that the init times do not include the others'.
	procs := map[string]*lambdaProcess{}
	for _, fn := range fns {
		procs[fn.name] = startFunction(t, ctx, fn.name, bins[fn.name], envOf(fn))
		procs[fn.name].waitInit(t, 15*time.Second)
	}
	for _, fn := range fns {
		p := procs[fn.name]
		line := fmt.Sprintf("functions/%-12s linux/%s %5.2f MB, init %4d ms", fn.name, runtime.GOARCH, mb(bins[fn.name]), p.initDur.Milliseconds())
		if arm := filepath.Join("../../bin", fn.name, "bootstrap"); mb(arm) > 0 {
			line += fmt.Sprintf("; bin/%s/bootstrap of the last make build (linux/arm64) %5.2f MB", fn.name, mb(arm))
		}
		t.Log(line)
	}

	for _, fn := range fns {
		p := procs[fn.name]
		t.Run(fn.name, func(t *testing.T) {
			if ctx.Err() != nil {
				t.Fatalf("out of time (%v)", bootstrapBudget)
			}
			switch fn.kind {
			case kindAPI:
				for _, name := range samplesOf(fn.name, all) {
					t.Run(name, func(t *testing.T) {
						f := newFixture(t, st)
						c := cases[name]
						if c.setup != nil {
							c.setup(t, f)
						}
						raw := sfntest.Substitute(t, all[name], f.vars)
						ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, raw)
						c.api(t, f, func() response {
							t.Helper()
							res, id := p.invoke(t, raw)
							if res.errorType != "" {
								t.Fatalf("the function answered an error (API Gateway would answer a bare 500): %s", res.body)
							}
							r := apiResponse(t, res.body, p.logs.of(id, "request"))
							checkCommon(t, r, ev, fn)
							return r
						})
					})
				}
				if fn.name == "deliveries" {
					t.Run("manual-retry", func(t *testing.T) { bootstrapManualRetry(t, p, st, queue, all) })
				}
			case kindApprover:
				f := newFixture(t, st)
				f.clock.Add(-3 * time.Hour) // a 2-hour hold that ended an hour ago
				c := f.recordConversion(t, f.createOffer(t, tally.ApprovalManual, 2), "held-1")
				for i, want := range []int{1, 0} {
					res := invokeOK[map[string]any](t, p, all["approver-scheduled"])
					wantField(t, res, "approved", want)
					if i == 0 {
						if got, err := f.svc.Conversion(t.Context(), f.brand.ID, c.ID); err != nil || got.Status != tally.ConversionApproved {
							t.Errorf("the conversion is %v (%v), want approved", got.Status, err)
						}
					}
				}
			case kindFanout:
				f := newFixture(t, st)
				f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret)
				f.subscribe(t, []string{tally.EventPartnerApplied, tally.EventConversionCreated}, "")
				f.applied(t, "Runner Media")
				raw := sfntest.Substitute(t, all["fanout-stream"], f.vars)
				before := len(queue.messages()) // the deliveries function queues too
				res := invokeOK[map[string]any](t, p, raw)
				if res["batchItemFailures"] != nil {
					t.Errorf("answer %v, want no batch item failures", res)
				}
				ds := f.deliveriesOf(t, f.event.ID)
				if len(ds) != 2 {
					t.Fatalf("%d deliveries, want 2", len(ds))
				}
				wantMessages(t, f, queue.messages()[before:], ds)
				// SQS refuses the messages: the INSERT record is reported.
				queue.mu.Lock()
				queue.refuse = 1
				queue.mu.Unlock()
				failed := invokeOK[events.DynamoDBEventResponse](t, p, raw)
				ev := decodeEvent[events.DynamoDBEvent](t, raw)
				if got := streamFailures(failed); !slices.Equal(got, []string{ev.Records[0].Change.SequenceNumber}) {
					t.Errorf("with the messages refused: failures %v, want the INSERT's sequence number", got)
				}
			case kindDeliver:
				bootstrapDeliver(t, p, st, executions, all["deliver-sqs"], smARN)
			case kindAttempt:
				bootstrapAttempt(t, p, st, all["attempt-task"])
			default:
				t.Fatalf("no end-to-end check for lambdafn.%s", fn.kind)
			}
		})
	}

	// A function without its resources fails at init: the process exits
	// before it asks for an invocation, saying what is missing.
	t.Run("init-error", func(t *testing.T) {
		var fanout function
		for _, fn := range fns {
			if fn.kind == kindFanout {
				fanout = fn
			}
		}
		p := startFunction(t, ctx, fanout.name, bins[fanout.name], base) // no TALLY_DELIVERY_QUEUE_URL
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			t.Fatal("the function without TALLY_DELIVERY_QUEUE_URL is still running")
		case <-ctx.Done():
			t.Fatalf("out of time (%v)", bootstrapBudget)
		}
		if ee, ok := p.exitErr.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("exit: %v, want status 1", p.exitErr)
		}
		select {
		case <-p.api.firstNext:
			t.Error("the function asked for an invocation")
		default:
		}
		if !strings.Contains(p.logs.text(), "TALLY_DELIVERY_QUEUE_URL is not set") {
			t.Errorf("its log does not say what is missing:\n%s", p.logs.text())
		}
	})
	t.Logf("TestBootstrap took %v", time.Since(begin).Round(time.Millisecond))
}

func mb(path string) float64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(fi.Size()) / (1 << 20)
}

// bootstrapDeliver runs the SQS sample through the deliver binary. Its
// sender is the cloud's, whose SSRF guard refuses loopback receivers, so
// both attempts fail without reaching them and both deliveries go on to
// the retry state machine.
func bootstrapDeliver(t *testing.T, p *lambdaProcess, st *dynamo.Store, executions *sfnAPI, sample []byte, smARN string) {
	f := newFixture(t, st)
	ok := f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret, 200)
	other := f.subscribe(t, []string{tally.EventPartnerApplied}, "", 200)
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	ds := f.deliveriesOf(t, evt.ID)
	f.vars["TALLY_DELIVERY_ID"], f.vars["TALLY_OTHER_DELIVERY_ID"] = ds[ok.ID].ID, ds[other.ID].ID
	raw := sfntest.Substitute(t, sample, f.vars)
	bad := decodeEvent[events.SQSEvent](t, raw).Records[2].MessageId
	wantNames := []string{ds[ok.ID].ID + "-0", ds[other.ID].ID + "-0"}
	slices.Sort(wantNames) // the messages of a batch are attempted concurrently
	for _, when := range []string{"first", "again, while the executions run", "again, after they ended (ExecutionAlreadyExists)"} {
		if strings.Contains(when, "ended") {
			executions.mu.Lock()
			clear(executions.running)
			executions.mu.Unlock()
		}
		res := invokeOK[events.SQSEventResponse](t, p, raw)
		if got := queueFailures(res); !slices.Equal(got, []string{bad}) {
			t.Errorf("%s: failures %v, want only the message that is no delivery (%s)", when, got, bad)
		}
		if got := slices.Sorted(slices.Values(executions.names())); !slices.Equal(got, wantNames) {
			t.Errorf("%s: executions %v, want %v", when, got, wantNames)
		}
	}
	if executions.refused != 2 {
		t.Errorf("ExecutionAlreadyExists answered %d times, want 2", executions.refused)
	}
	executions.mu.Lock()
	for _, s := range executions.started {
		if s.StateMachineArn != smARN || !strings.HasPrefix(s.Input, `{"brandId":"`+f.brand.ID+`","deliveryId":"wh_`) {
			t.Errorf("execution %+v", s)
		}
	}
	executions.mu.Unlock()
	for _, sub := range []tally.Subscription{ok, other} {
		if n := f.receivers[sub.ID].count(); n != 0 {
			t.Errorf("a loopback receiver got %d requests from the cloud sender", n)
		}
		d := f.delivery(t, ds[sub.ID].ID)
		if d.Status != tally.DeliveryPending || len(d.Attempts) != 1 || d.Attempts[0].Error != tally.AttemptBlocked {
			t.Errorf("delivery %+v, want pending after one attempt refused by the SSRF guard", d)
		}
	}
}

// bootstrapAttempt runs the task sample through the attempt binary, and a
// task the delivery is not ready for, which answers a function error.
func bootstrapAttempt(t *testing.T, p *lambdaProcess, st *dynamo.Store, sample []byte) {
	f := newFixture(t, st)
	sub := f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret, 500)
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	d := f.deliveriesOf(t, evt.ID)[sub.ID]
	if _, err := f.svc.Attempt(t.Context(), tracking.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}, 1, f.sender); err != nil {
		t.Fatal(err)
	}
	f.vars["TALLY_DELIVERY_ID"] = d.ID
	raw := sfntest.Substitute(t, sample, f.vars)
	res := invokeOK[map[string]any](t, p, raw)
	wantField(t, res, "status", tally.DeliveryPending)
	wantField(t, res, "attempts", 2)
	wantField(t, res, "cycle", 0)
	wantField(t, res, "sent", true)
	if d = f.delivery(t, d.ID); len(d.Attempts) != 2 || d.Attempts[1].Error != tally.AttemptBlocked {
		t.Errorf("delivery %+v, want attempt 2 refused by the SSRF guard", d)
	}
	again := invokeOK[map[string]any](t, p, raw)
	wantField(t, again, "attempts", 2)
	wantField(t, again, "sent", false)

	// Attempt 4 before attempt 3: a function error, which the state
	// machine's Retry (States.TaskFailed) takes.
	errRes, _ := p.invoke(t, bytes.Replace(raw, []byte(`"attempt": 2`), []byte(`"attempt": 4`), 1))
	var lambdaErr struct{ ErrorMessage, ErrorType string }
	json.Unmarshal(errRes.body, &lambdaErr)
	if errRes.errorType == "" || !strings.Contains(lambdaErr.ErrorMessage, "attempt 4") {
		t.Errorf("attempt 4 before 3: %q %s, want a function error", errRes.errorType, errRes.body)
	}
	if n := f.receivers[sub.ID].count(); n != 1 {
		t.Errorf("the receiver got %d requests, want only attempt 1 (made here)", n)
	}
}

// bootstrapManualRetry retries a failed delivery through the deliveries
// binary, which queues it on the delivery queue: exactly one message.
func bootstrapManualRetry(t *testing.T, p *lambdaProcess, st *dynamo.Store, queue *sqsAPI, all map[string][]byte) {
	f := newFixture(t, st)
	sub := f.subscribe(t, []string{tally.EventPartnerApplied}, "", 500)
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	d := f.deliveriesOf(t, evt.ID)[sub.ID]
	for n := 1; n <= tracking.MaxAttempts; n++ {
		if _, err := f.svc.Attempt(t.Context(), tracking.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}, n, f.sender); err != nil {
			t.Fatal(err)
		}
	}
	ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, all["deliveries-list"], f.vars))
	path := "/api/v1/deliveries/" + d.ID + "/retry"
	ev.RouteKey, ev.RawPath, ev.RawQueryString = "POST /api/v1/deliveries/{id}/retry", path, ""
	ev.RequestContext.RouteKey, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = ev.RouteKey, "POST", path
	raw, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	before := len(queue.messages())
	res, id := p.invoke(t, raw)
	r := apiResponse(t, res.body, p.logs.of(id, "request"))
	wantStatus(t, r, 200)
	wantField(t, r.body, "status", tally.DeliveryPending)
	if got, want := queue.messages()[before:], []string{messageBody(f.brand.ID, d.ID)}; !slices.Equal(got, want) {
		t.Errorf("queued %q, want exactly %q", got, want)
	}
}
