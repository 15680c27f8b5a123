//go:build linux

package lambdafn_test

// TestBootstrap runs each function as Lambda runs it: the bootstrap binary
// that `make build` makes, started as a process that talks to the Lambda
// Runtime API (a stand-in served here on loopback), with its environment as
// docs/aws.md lays it out. The table is DynamoDB Local; SQS is fauxqs
// (through the counting proxy of queue_test.go); Step Functions is an
// sfntest.Server whose executions run the retry workflow in local-sfn. The
// functions reach them through AWS_ENDPOINT_URL_SQS and AWS_ENDPOINT_URL_SFN.
//
// `make build` makes linux/arm64 binaries, which cannot run on this amd64
// machine, so the test builds the same way (lambdacheck.Build) for the
// host's architecture into a temporary folder. It logs each binary's size (and that of the arm64
// bin/<fn>/bootstrap, when `make build` was run) and its init time: from the
// process's start to its first call for the next invocation.

import (
	"bytes"
	"context"
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
	"regexp"
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
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdacheck"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/lambdafn/deliver"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/secretbox/secretboxtest"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/webhooks"
)

// bootstrapBudget bounds running the functions, once built; the builds
// have buildBudget of their own, since compiling every function takes
// minutes on a loaded machine (the whole suite runs in parallel). Running
// them takes 20–50 s; a minute ran out at a load of 18 on 2 cores.
const (
	bootstrapBudget = 3 * time.Minute
	buildBudget     = 5 * time.Minute
)

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
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command to build the functions with")
	}
	out := t.TempDir()
	start := time.Now()
	var pkgs []string
	for _, fn := range fns {
		pkgs = append(pkgs, "./functions/"+fn.name)
	}
	built, err := lambdacheck.Build(ctx, root, out, runtime.GOARCH, pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("built %d functions for linux/%s in %v", len(fns), runtime.GOARCH, time.Since(start).Round(time.Millisecond))
	bins := map[string]string{}
	for _, fn := range fns {
		dir := filepath.Join(out, fn.name+".d")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		bins[fn.name] = filepath.Join(dir, "bootstrap")
		if err := os.Rename(built[fn.name], bins[fn.name]); err != nil {
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

// answer decodes an API function's answer to invocation id and waits
// (briefly) for its log lines: the process writes them before it answers,
// but they travel through a pipe. They are the lines of the invocation
// (awsRequestId) and the request's own (requestId: the answer's
// X-Request-Id), which ends them.
func (p *lambdaProcess) answer(t *testing.T, res invocationResult, id string) response {
	t.Helper()
	r := apiResponse(t, res.body, nil)
	requestID := r.header("X-Request-Id")
	deadline := time.Now().Add(2 * time.Second)
	for {
		p.logs.mu.Lock()
		var out []map[string]any
		found := false
		for _, rec := range p.logs.records {
			if rec["awsRequestId"] == id || rec["requestId"] == requestID {
				out = append(out, rec)
				found = found || isRequestLine(rec) && rec["requestId"] == requestID
			}
		}
		p.logs.mu.Unlock()
		if found || time.Now().After(deadline) {
			r.logs = out
			return r
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestBootstrap(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs every function's binary")
	}
	begin := time.Now()
	fns := functions(t)
	all := samples(t)
	buildCtx, cancelBuild := context.WithTimeout(t.Context(), buildBudget)
	bins := buildBootstraps(buildCtx, t, fns)
	cancelBuild()
	ctx, cancel := context.WithTimeout(t.Context(), bootstrapBudget)
	defer cancel()

	client, table := dynamotest.NewTable(t)
	st := dynamo.New(client, table)
	deliveryQueue := newTestQueue(t)
	// The retry workflow's waits last a minute here: executions stay
	// running while the test looks at them.
	const smARN = "arn:aws:states:us-east-1:123456789012:stateMachine:RetryStateMachine-Vb3Xy9Qw1Ert"
	executions := sfntest.NewServer(t, smARN, sfntest.RetryWorkflow(t, "arn:aws:lambda:us-east-1:123456789012:function:tally-AttemptFunction",
		table, dynamotest.Endpoint(t), time.Minute))
	home := t.TempDir()
	base := []string{
		"TALLY_TABLE=" + table,
		"AWS_REGION=us-east-1", "AWS_DEFAULT_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=tally", "AWS_SECRET_ACCESS_KEY=tally", "AWS_SESSION_TOKEN=tally",
		"AWS_CONFIG_FILE=" + filepath.Join(home, "config"), "AWS_SHARED_CREDENTIALS_FILE=" + filepath.Join(home, "credentials"),
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynamotest.Endpoint(t),
		"AWS_ENDPOINT_URL_SQS=" + deliveryQueue.proxy,
		"AWS_ENDPOINT_URL_SFN=" + executions.URL,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256", "AWS_LAMBDA_FUNCTION_VERSION=$LATEST",
		"AWS_EXECUTION_ENV=AWS_Lambda_provided.al2023", "_HANDLER=bootstrap", "TZ=:UTC",
	}
	fanoutDLQ := sqstest.NewQueue(t, deliveryQueue.direct, nil)
	// KMS cannot run here: its stand-in keeps the data key unwrapped
	// (secretbox.Unwrapped), as the fixtures' services and the retry
	// workflow's attempts, which share the table, do.
	const keyARN = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
	kms := secretboxtest.KMSServer(t, secretbox.Unwrapped{}, "us-east-1", keyARN)
	base = append(base, "AWS_ENDPOINT_URL_KMS="+kms.URL)
	// The environment of each function, per docs/aws.md.
	envOf := func(fn function) []string {
		env := slices.Clone(base)
		if fn.kind == kindFanout || fn.kind == kindReconciler || fn.kind == kindDeliver || fn.name == "deliveries" || fn.name == "dashboard" {
			env = append(env, "TALLY_DELIVERY_QUEUE_URL="+deliveryQueue.URL)
		}
		if fn.kind == kindReconciler {
			env = append(env, "TALLY_FANOUT_DLQ_URL="+fanoutDLQ.URL)
		}
		if fn.kind == kindDeliver {
			env = append(env, "TALLY_RETRY_STATE_MACHINE_ARN="+smARN)
		}
		if fn.kind == kindDeliver || fn.kind == kindAttempt || fn.name == "webhooks" || fn.name == "dashboard" {
			env = append(env, "TALLY_SECRETS_KEY_ARN="+keyARN)
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
							r := p.answer(t, res, id)
							checkCommon(t, r, ev, fn)
							return r
						})
					})
				}
				switch fn.name {
				case "deliveries":
					t.Run("manual-retry", func(t *testing.T) { bootstrapManualRetry(t, p, st, deliveryQueue, all) })
				case "dashboard":
					t.Run("retry-button", func(t *testing.T) { bootstrapDashboardRetry(t, p, st, deliveryQueue, all) })
				}
			case kindApprover:
				f := newFixture(t, st)
				f.clock.Add(-3 * time.Hour) // a 2-hour hold that ended an hour ago
				c := f.recordConversion(t, f.createOffer(t, tally.ApprovalManual, 2), "held-1")
				for i, want := range []int{1, 0} {
					res := invokeOK[map[string]any](t, p, all["approver-scheduled"])
					wantField(t, res, "approved", want)
					if i == 0 {
						if got, err := f.svc.Conversions.Conversion(t.Context(), f.brand.ID, c.ID); err != nil || got.Status != tally.ConversionApproved {
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
				before := len(deliveryQueue.messages(t)) // the deliveries function queues too
				res := invokeOK[map[string]any](t, p, raw)
				if res["batchItemFailures"] != nil {
					t.Errorf("answer %v, want no batch item failures", res)
				}
				if ds := carried(t, deliveryQueue.messages(t)[before:]); len(ds) != 2 {
					t.Fatalf("%d deliveries carried in the messages, want 2", len(ds))
				}
				// SQS refuses the messages: the INSERT record is reported.
				deliveryQueue.refuseFrom(1, refuseAll)
				failed := invokeOK[events.DynamoDBEventResponse](t, p, raw)
				deliveryQueue.refuseFrom(1, accept)
				ev := decodeEvent[events.DynamoDBEvent](t, raw)
				if got := streamFailures(failed); !slices.Equal(got, []string{ev.Records[0].Change.SequenceNumber}) {
					t.Errorf("with the messages refused: failures %v, want the INSERT's sequence number", got)
				}
			case kindDeliver:
				bootstrapDeliver(t, p, st, executions, all["deliver-sqs"])
			case kindAttempt:
				bootstrapAttempt(t, p, st, all["attempt-task"])
			case kindReconciler:
				bootstrapReconciler(t, p, st, deliveryQueue, all["reconciler-scheduled"])
			case kindRollup:
				f := newFixture(t, st)
				for _, when := range []string{"after the batch", "after it was repeated"} {
					if res := invokeOK[map[string]any](t, p, all["rollup-stream"]); res["state"] == nil {
						t.Errorf("answer %v without state: Lambda takes it for a failure", res)
					}
					wantRollupSample(t, f, when)
				}
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

// bootstrapDeliver runs the SQS sample through the deliver binary, whose
// Step Functions client starts the retry executions on executions. Its
// sender is the cloud's, which cannot reach a receiver here (a loopback one
// is refused by the SSRF guard, for good), so both receivers are names no
// resolver looks up: both attempts fail, and both deliveries go on to the
// retry state machine.
func bootstrapDeliver(t *testing.T, p *lambdaProcess, st *dynamo.Store, executions *sfntest.Server, sample []byte) {
	f := newFixture(t, st)
	ok := f.subscribeURL(t, unresolvable(1), []string{tally.EventPartnerApplied}, webhookSecret)
	other := f.subscribeURL(t, unresolvable(2), []string{tally.EventPartnerApplied}, "")
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	ds := f.deliveriesOf(t, evt.ID)
	f.vars["TALLY_DELIVERY_ID"], f.vars["TALLY_OTHER_DELIVERY_ID"] = ds[ok.ID].ID, ds[other.ID].ID
	raw := sfntest.Substitute(t, sample, f.vars)
	bad := decodeEvent[events.SQSEvent](t, raw).Records[2].MessageId
	var first, restarts []string
	for _, sub := range []tally.Subscription{ok, other} {
		first = append(first, ds[sub.ID].ID+"-0")
		restarts = append(restarts, ds[sub.ID].ID+"-0-r1")
	}
	before := len(executions.Names())
	started := func() []string { return slices.Sorted(slices.Values(executions.Names()[before:])) }
	for _, when := range []string{"first", "again, while the executions run (waiting a minute)", "again, after they were stopped (restarted)"} {
		want := first
		if strings.Contains(when, "stopped") {
			for _, name := range first {
				if res := executions.Stop(t, name); res.Status != sfntest.StatusAborted {
					t.Errorf("stopped execution %v", res)
				}
			}
			want = slices.Concat(first, restarts)
		}
		res := invokeOK[events.SQSEventResponse](t, p, raw)
		if got := queueFailures(res); !slices.Equal(got, []string{bad}) {
			t.Errorf("%s: failures %v, want only the message that is no delivery (%s)", when, got, bad)
		}
		if got := started(); !slices.Equal(got, slices.Sorted(slices.Values(want))) {
			t.Errorf("%s: executions %v, want %v", when, got, want)
		}
	}
	for _, name := range started() {
		e := executions.Describe(t, name)
		var in attempt.RetryInput
		restart := strings.HasSuffix(name, "-r1")
		if err := json.Unmarshal([]byte(e.Input), &in); err != nil || in.BrandID != f.brand.ID ||
			restart != (e.Status == sfntest.StatusRunning) || restart != (in.Attempt == 2 && in.ResumeAt != nil) {
			t.Errorf("execution %s: %s, input %s", name, e.Status, e.Input)
		}
	}
	for _, sub := range []tally.Subscription{ok, other} {
		d := f.delivery(t, ds[sub.ID].ID)
		if d.Status != tally.DeliveryPending || len(d.Attempts) != 1 || !retriedFailure(d.Attempts[0]) {
			t.Errorf("delivery %+v, want pending after one attempt that reached no receiver", d)
		}
	}
}

// bootstrapReconciler runs the scheduled sample through the reconciler
// binary: an event written an hour ago and never fanned out is fanned out
// and its delivery queued (carried in the message: the event's only one);
// once the deliver function has made attempt 1, the next run leaves it.
func bootstrapReconciler(t *testing.T, p *lambdaProcess, st *dynamo.Store, deliveryQueue *testQueue, sample []byte) {
	f := newFixture(t, st)
	f.clock.Add(-time.Hour)
	f.fanOutAll(t)
	f.subscribe(t, []string{tally.EventPartnerApplied}, "")
	evt := f.applied(t, "Runner Media")
	before := len(deliveryQueue.messages(t))
	res := invokeOK[fanout.ReconcilerResult](t, p, sample)
	if res.Events < 1 {
		t.Fatalf("result %+v; want the dropped event fanned out", res)
	}
	msg, ok := plannedOf(t, deliveryQueue.messages(t)[before:], evt.ID)
	if !ok {
		t.Fatalf("queued %q, want the delivery of %s among them", deliveryQueue.messages(t)[before:], evt.ID)
	}
	// The deliver function's step: attempt 1 writes the delivery.
	h := deliver.DeliverHandler(f.svc.Webhooks, f.sender, f.executions, stateMachineARN, deliver.Later(deliveryQueue.client, deliveryQueue.URL), f.cfg.Logger)
	if out, err := h(lambdaContext(t, "deliver-invocation"), events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: msg}}}); err != nil || len(out.BatchItemFailures) > 0 {
		t.Fatalf("deliver: %+v, %v", out, err)
	}
	if ds := f.deliveriesOf(t, evt.ID); len(ds) != 1 {
		t.Fatalf("%d deliveries of the dropped event after attempt 1, want 1", len(ds))
	}
	before = len(deliveryQueue.messages(t))
	invokeOK[fanout.ReconcilerResult](t, p, sample)
	if _, again := plannedOf(t, deliveryQueue.messages(t)[before:], evt.ID); again {
		t.Errorf("the next run queued the delivery again")
	}
}

// bootstrapAttempt runs the task sample through the attempt binary, and a
// task the delivery is not ready for, which answers a function error. The
// receiver is a name no resolver looks up, so every attempt fails and is
// retried.
func bootstrapAttempt(t *testing.T, p *lambdaProcess, st *dynamo.Store, sample []byte) {
	f := newFixture(t, st)
	sub := f.subscribeURL(t, unresolvable(1), []string{tally.EventPartnerApplied}, webhookSecret)
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	d := f.deliveriesOf(t, evt.ID)[sub.ID]
	if _, err := f.svc.Webhooks.Attempt(t.Context(), endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}, 1, f.sender); err != nil {
		t.Fatal(err)
	}
	f.vars["TALLY_DELIVERY_ID"] = d.ID
	raw := sfntest.Substitute(t, sample, f.vars)
	res := invokeOK[map[string]any](t, p, raw)
	wantField(t, res, "status", tally.DeliveryPending)
	wantField(t, res, "attempts", 2)
	wantField(t, res, "cycle", 0)
	wantField(t, res, "sent", true)
	if d = f.delivery(t, d.ID); len(d.Attempts) != 2 || !retriedFailure(d.Attempts[1]) {
		t.Errorf("delivery %+v, want attempt 2 failed, reaching no receiver", d)
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
}

// failedDelivery is a delivery of f's brand that has failed all its
// attempts.
func failedDelivery(t *testing.T, f *fixture) tally.Delivery {
	sub := f.subscribe(t, []string{tally.EventPartnerApplied}, "", 500)
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	d := f.deliveriesOf(t, evt.ID)[sub.ID]
	for n := 1; n <= webhooks.MaxAttempts; n++ {
		if _, err := f.svc.Webhooks.Attempt(t.Context(), endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}, n, f.sender); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// wantQueued checks that exactly delivery d of f's brand was queued since
// the queue held before messages.
func wantQueued(t *testing.T, f *fixture, deliveryQueue *testQueue, before int, d tally.Delivery) {
	t.Helper()
	if got, want := deliveryQueue.messages(t)[before:], []string{messageBody(f.brand.ID, d.ID)}; !slices.Equal(got, want) {
		t.Errorf("queued %q, want exactly %q", got, want)
	}
}

// bootstrapManualRetry retries a failed delivery through the deliveries
// binary, which queues it on the delivery deliveryQueue: exactly one message.
func bootstrapManualRetry(t *testing.T, p *lambdaProcess, st *dynamo.Store, deliveryQueue *testQueue, all map[string][]byte) {
	f := newFixture(t, st)
	d := failedDelivery(t, f)
	ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, all["deliveries-list"], f.vars))
	path := "/api/v1/deliveries/" + d.ID + "/retry"
	ev.RouteKey, ev.RawPath, ev.RawQueryString = "POST /api/v1/deliveries/{id}/retry", path, ""
	ev.RequestContext.RouteKey, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = ev.RouteKey, "POST", path
	before := len(deliveryQueue.messages(t))
	res, id := p.invoke(t, []byte(mustJSON(t, ev)))
	r := p.answer(t, res, id)
	wantStatus(t, r, 200)
	wantField(t, r.body, "status", tally.DeliveryPending)
	wantQueued(t, f, deliveryQueue, before, d)
}

// bootstrapDashboardRetry presses a failed delivery's Retry button through
// the dashboard binary, signed in: the delivery is queued at once, as from
// the API, rather than left for the reconciler.
func bootstrapDashboardRetry(t *testing.T, p *lambdaProcess, st *dynamo.Store, deliveryQueue *testQueue, all map[string][]byte) {
	f := newFixture(t, st)
	d := failedDelivery(t, f)
	email := "owner@northwind.example"
	u, err := f.svc.Accounts.CreateUser(t.Context(), accounts.UserInput{BrandID: &f.brand.ID, Email: &email, Password: ptr("correct horse battery staple")})
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := f.svc.Accounts.StartSession(t.Context(), u)
	if err != nil {
		t.Fatal(err)
	}
	page := func(method, path, body string) response {
		t.Helper()
		ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, all["dashboard-overview"])
		ev.RouteKey = method + " /dashboard/{path+}"
		ev.RawPath, ev.Body, ev.Cookies = path, body, []string{"tally_session=" + token}
		ev.PathParameters = map[string]string{"path": strings.TrimPrefix(path, "/dashboard/")}
		ev.RequestContext.RouteKey, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = ev.RouteKey, method, path
		if body != "" {
			ev.Headers["content-type"] = "application/x-www-form-urlencoded"
		}
		res, id := p.invoke(t, []byte(mustJSON(t, ev)))
		return p.answer(t, res, id)
	}
	path := "/dashboard/activity/deliveries/" + d.ID
	shown := page("GET", path, "")
	wantStatus(t, shown, 200)
	csrf := regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`).FindStringSubmatch(shown.page)
	if csrf == nil {
		t.Fatalf("the delivery's page has no form token: %.500s", shown.page)
	}
	before := len(deliveryQueue.messages(t))
	r := page("POST", path+"/retry", "csrf="+csrf[1])
	wantStatus(t, r, 303)
	if loc := r.header("Location"); !strings.HasPrefix(loc, path) {
		t.Errorf("after the retry, to %q, want the delivery's page", loc)
	}
	wantQueued(t, f, deliveryQueue, before, d)
	if got := f.delivery(t, d.ID); got.Status != tally.DeliveryPending {
		t.Errorf("the delivery is %s after the retry, want pending", got.Status)
	}
}
