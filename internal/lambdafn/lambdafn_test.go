package lambdafn_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/deploy"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/approve"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/lambdafn/rollup"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/portal"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { sqstest.Main(m) }

const (
	functionsDir = "../../functions"
	eventsDir    = "../../events"
)

// function is what a functions/<name>/main.go serves, read from its source,
// so the test runs exactly the groups the deployed function mounts.
type function struct {
	name   string
	kind   string   // the lambdafn.Serve* its main calls
	groups []string // api.Serve(groups, ...)
}

// The kinds of function, by the lambdafn call of their main. A Serve* added
// to lambdafn without a line here fails TestFunctionsAreCovered.
const (
	kindAPI        = "ServeAPI"        // API Gateway HTTP API events
	kindApprover   = "ServeApprover"   // EventBridge scheduled events
	kindFanout     = "ServeFanout"     // DynamoDB Streams batches
	kindDeliver    = "ServeDeliver"    // SQS batches
	kindAttempt    = "ServeAttempt"    // the retry state machine's task payload
	kindReconciler = "ServeReconciler" // EventBridge scheduled events
	kindRollup     = "ServeRollup"     // DynamoDB Streams batches with a tumbling window
)

// allGroups are the groups a function may serve: httpapi.AllGroups (which
// the local server runs together) and the fallback, which only API
// Gateway's $default route needs.
var allGroups = append(slices.Clone(httpapi.AllGroups), httpapi.GroupFallback)

// functions reads every functions/*/main.go for its call of a lambdafn package.
func functions(t *testing.T) []function {
	t.Helper()
	mains, err := deploy.ReadMains("../..")
	if err != nil {
		t.Fatal(err)
	}
	fns := make([]function, len(mains))
	for i, m := range mains {
		fns[i] = function{name: m.Dir, kind: m.Serve, groups: m.Groups}
		if !slices.Contains([]string{kindAPI, kindApprover, kindFanout, kindDeliver, kindAttempt, kindReconciler, kindRollup}, m.Serve) {
			t.Errorf("functions/%s calls lambdafn.%s, which this test does not know", m.Dir, m.Serve)
		}
	}
	return fns
}

// groupsOf returns the route groups functions/<name> serves.
func groupsOf(t *testing.T, name string) []string {
	t.Helper()
	for _, fn := range functions(t) {
		if fn.name == name {
			return fn.groups
		}
	}
	t.Fatalf("no functions/%s", name)
	return nil
}

// isFallback reports whether fn is the function behind the $default route.
func (fn function) isFallback() bool {
	return fn.kind == kindAPI && slices.Equal(fn.groups, []string{httpapi.GroupFallback})
}

// samples returns events/*.json by name without the extension.
func samples(t *testing.T) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(eventsDir, "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[strings.TrimSuffix(filepath.Base(p), ".json")] = b
	}
	return out
}

// samplesOf returns the names of fn's samples, <function>-<action>.
func samplesOf(fn string, all map[string][]byte) []string {
	var names []string
	for name := range all {
		if strings.HasPrefix(name, fn+"-") {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// clock is the services' time, moved by the approver tests.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// logBuffer collects the JSON log lines of a handler.
type logBuffer struct{ testenv.SyncBuffer }

// take returns the lines written since the last take.
func (l *logBuffer) take(t *testing.T) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(l.Take()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line is not JSON: %s", sc.Text())
		}
		lines = append(lines, m)
	}
	return lines
}

// fixture is one brand with what the samples refer to, on a fresh store:
// an active offer with automatic approval, an active partner and one
// approved conversion.
type fixture struct {
	st    store.Store
	clock *clock
	svc   *service.Service
	logs  *logBuffer
	cfg   httpapi.Config

	// The webhook pipeline's AWS services: the delivery queue in fauxqs
	// (made when first used: deliveryQueue), Step Functions faked at the
	// SDK interface (pipeline_test.go); and the sender for loopback
	// receivers.
	queue      *testQueue
	executions *fakeExecutions
	sender     *delivery.Sender

	brand      tally.Brand
	key        string
	keyID      string
	offer      tally.Offer
	partner    tally.Partner
	conversion tally.Conversion
	vars       map[string]string

	// What a pipeline case's setup made, for its checks.
	event     tally.Event
	subs      []tally.Subscription
	receivers map[string]*receiver // by subscription id
}

// newFixture makes the fixture's brand on st. Its service lets webhook
// subscriptions point at loopback receivers (httptest servers), as the
// local server does; opts add to its options.
func newFixture(t *testing.T, st store.Store, opts ...service.Option) *fixture {
	t.Helper()
	ctx := t.Context()
	f := &fixture{st: st, clock: &clock{now: time.Now().UTC()}, logs: &logBuffer{}, receivers: map[string]*receiver{}}
	f.svc = servicetest.New(st, append([]service.Option{service.WithClock(f.clock.Now), service.WithLoopbackReceivers()}, opts...)...)
	f.cfg = httpapi.Config{Logger: slog.New(slog.NewJSONHandler(f.logs, nil))}
	f.cfg.Dashboard = dashboard.New(f.svc.API(), f.cfg)
	f.cfg.Portal = portal.New(f.svc.API(), f.cfg)
	f.executions = &fakeExecutions{}
	f.sender = delivery.NewSender(delivery.Options{AllowLoopback: true, Timeout: 5 * time.Second})
	var err error
	if f.brand, err = f.svc.Identity.CreateBrand(ctx, "Northwind Running"); err != nil {
		t.Fatal(err)
	}
	k, err := f.svc.Identity.CreateKey(ctx, f.brand.ID, identity.APIKeyInput{})
	if err != nil {
		t.Fatal(err)
	}
	f.key, f.keyID = k.Key, k.ID
	f.offer = f.createOffer(t, tally.ApprovalAuto, 0)
	f.partner = f.activePartner(t, "Trail Deals", "hello@traildeals.example")
	f.conversion = f.recordConversion(t, f.offer, "fixture-1")
	click, _, err := f.svc.Clicks.RecordClick(ctx, clicks.ClickInput{OfferID: f.offer.ID, PartnerID: f.partner.ID,
		IP: netip.MustParseAddr("198.51.100.7"), UserAgent: "Mozilla/5.0", Subs: [5]string{"spring"}})
	if err != nil {
		t.Fatal(err)
	}
	token, err := f.svc.Identity.CreatePostbackToken(ctx, f.brand.ID)
	if err != nil {
		t.Fatal(err)
	}
	f.vars = map[string]string{
		"TALLY_CLICK_ID":       click.ID,
		"TALLY_POSTBACK_TOKEN": token.Token,
		"TALLY_API_KEY":        f.key,
		"TALLY_BRAND_ID":       f.brand.ID,
		"TALLY_OFFER_ID":       f.offer.ID,
		"TALLY_PARTNER_ID":     f.partner.ID,
		"TALLY_CONVERSION_ID":  f.conversion.ID,
	}
	return f
}

func ptr[T any](v T) *T { return &v }

// deliveryQueue is the fixture's delivery queue, made on first use.
func (f *fixture) deliveryQueue(t *testing.T) *testQueue {
	t.Helper()
	if f.queue == nil {
		f.queue = newTestQueue(t)
	}
	return f.queue
}

func (f *fixture) createOffer(t *testing.T, approval string, holdHours int) tally.Offer {
	t.Helper()
	o, err := f.svc.Offers.CreateOffer(t.Context(), f.brand.ID, offers.OfferInput{
		Name: ptr("Trail Shoes " + approval), DestinationURL: ptr("https://shop.example.com/trail?click={click_id}"),
		RevenueCents: ptr[int64](4500), PayoutCents: ptr[int64](1200), Currency: ptr("EUR"),
		Approval: ptr(approval), HoldHours: ptr(holdHours),
	})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func (f *fixture) appliedPartner(t *testing.T, name, email string) tally.Partner {
	t.Helper()
	p, err := f.svc.Partners.Apply(t.Context(), f.brand.ID, partners.ApplicationInput{Name: ptr(name), Email: ptr(email)})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fixture) activePartner(t *testing.T, name, email string) tally.Partner {
	t.Helper()
	p, err := f.svc.Partners.ApprovePartner(t.Context(), f.brand.ID, f.appliedPartner(t, name, email).ID)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (f *fixture) recordConversion(t *testing.T, o tally.Offer, txn string) tally.Conversion {
	t.Helper()
	c, _, err := f.svc.Conversions.RecordConversion(t.Context(), f.brand.ID, conversions.ConversionInput{
		OfferID: ptr(o.ID), PartnerID: ptr(f.partner.ID), ExternalTxnID: ptr(txn),
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// response is an API answer as a client sees it.
type response struct {
	status  int
	headers map[string]string
	body    map[string]any // a JSON answer
	page    string         // an HTML answer (the dashboard's)
	cookies []string       // Set-Cookie values, which payload 2.0 answers carry apart
	logs    []map[string]any
}

func (r response) header(name string) string {
	for k, v := range r.headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

func (r response) errorCode() string {
	e, _ := r.body["error"].(map[string]any)
	code, _ := e["code"].(string)
	return code
}

func (r response) errorMessage() string {
	e, _ := r.body["error"].(map[string]any)
	msg, _ := e["message"].(string)
	return msg
}

func (r response) list() []map[string]any {
	var out []map[string]any
	items, _ := r.body["data"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		out = append(out, m)
	}
	return out
}

// lambdaContext is the context the Lambda runtime gives a handler.
func lambdaContext(t *testing.T, id string) context.Context {
	return lambdacontext.NewContext(t.Context(), &lambdacontext.LambdaContext{AwsRequestID: id})
}

// invokeAPI runs an event through h the way the Lambda runtime does: the
// event decoded from JSON, the answer encoded to JSON and read back.
func invokeAPI(t *testing.T, f *fixture, h api.APIFunc, ev events.APIGatewayV2HTTPRequest) response {
	t.Helper()
	f.logs.take(t)
	out, err := h(lambdaContext(t, "5c1f0e52-7f1b-4d2f-9a55-0c1d2e3f4a5b"), ev)
	if err != nil {
		t.Fatalf("the handler returned an error (API Gateway would answer a bare 500): %v", err)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return apiResponse(t, raw, f.logs.take(t))
}

// apiResponse reads a function's answer to an API Gateway event, as JSON,
// the way API Gateway does; logs are the function's log lines for it.
func apiResponse(t *testing.T, raw []byte, logs []map[string]any) response {
	t.Helper()
	var wire events.APIGatewayV2HTTPResponse
	if err := json.Unmarshal(raw, &wire); err != nil {
		t.Fatalf("the answer is not an API Gateway response: %v: %s", err, raw)
	}
	r := response{status: wire.StatusCode, headers: wire.Headers, cookies: wire.Cookies, logs: logs}
	if wire.IsBase64Encoded {
		t.Fatalf("JSON answer is base64-encoded: %q", wire.Body)
	}
	if r.status == http.StatusFound { // a tracking link's redirect has no body
		if wire.Body != "" || r.header("Location") == "" {
			t.Errorf("redirect with body %q and Location %q", wire.Body, r.header("Location"))
		}
		return r
	}
	if r.header("Content-Type") == "text/html; charset=utf-8" || (r.status == 303 && r.header("Location") != "") {
		r.page = wire.Body
		return r
	}
	if err := json.Unmarshal([]byte(wire.Body), &r.body); err != nil {
		t.Fatalf("status %d: body is not a JSON object: %q", r.status, wire.Body)
	}
	if ct := r.header("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", ct)
	}
	return r
}

func decodeEvent[T any](t *testing.T, raw []byte) T {
	t.Helper()
	var ev T
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&ev); err != nil {
		t.Fatalf("sample does not decode: %v", err)
	}
	return ev
}

func apiHandler(t *testing.T, f *fixture, groups []string) api.APIFunc {
	t.Helper()
	h, err := api.APIHandler(f.svc.API(), f.cfg, groups...)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// sampleCase is what one sample must do through its function. Exactly one
// of the checks is set, the one for its function's kind.
type sampleCase struct {
	// onAWS wires the fixture as the functions run on AWS (service.OnAWS:
	// rollups left to the stream), where the function's role allows only
	// that: the click's does not let it update rollups.
	onAWS bool
	// setup adjusts the fixture (and f.vars) before the sample is filled in.
	setup func(t *testing.T, f *fixture)
	// api checks an API sample; call invokes it (again).
	api func(t *testing.T, f *fixture, call func() response)
	// approver checks the scheduled sample.
	approver func(t *testing.T, f *fixture, call func() (approve.Result, error))
	// fanout checks the stream sample ev; call runs a batch through the
	// fan-out handler, which sends to f.queue.
	fanout func(t *testing.T, f *fixture, ev events.DynamoDBEvent, call func(events.DynamoDBEvent) events.DynamoDBEventResponse)
	// deliver checks the queue sample ev; call runs a batch through the
	// deliver handler, which sends with f.sender and starts f.executions.
	deliver func(t *testing.T, f *fixture, ev events.SQSEvent, call func(events.SQSEvent) events.SQSEventResponse)
	// attempt checks the task sample in; call runs a task through the attempt
	// handler and returns its answer as the state machine reads it (JSON).
	attempt func(t *testing.T, f *fixture, in attempt.RetryInput, call func(attempt.RetryInput) (map[string]any, error))
	// reconciler checks the scheduled sample; call runs the reconciler's
	// handler, which queues on f.deliveryQueue.
	reconciler func(t *testing.T, f *fixture, call func() (fanout.ReconcilerResult, error))
	// rollup checks the stream sample ev; call runs a batch through the
	// rollup handler.
	rollup func(t *testing.T, f *fixture, ev events.DynamoDBTimeWindowEvent, call func(events.DynamoDBTimeWindowEvent) error)
}

// fits reports whether the case checks a sample of a function of kind.
func (c sampleCase) fits(kind string) bool {
	set := map[string]bool{kindAPI: c.api != nil, kindApprover: c.approver != nil, kindFanout: c.fanout != nil,
		kindDeliver: c.deliver != nil, kindAttempt: c.attempt != nil, kindReconciler: c.reconciler != nil, kindRollup: c.rollup != nil}
	n := 0
	for _, ok := range set {
		if ok {
			n++
		}
	}
	return n == 1 && set[kind]
}

func wantStatus(t *testing.T, r response, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status = %d, want %d; body %v", r.status, status, r.body)
	}
}

func wantField(t *testing.T, obj map[string]any, field string, want any) {
	t.Helper()
	got := obj[field]
	if n, ok := want.(int); ok {
		want = float64(n)
	}
	if got != want {
		t.Errorf("%s = %v, want %v", field, got, want)
	}
}

func wantPrefix(t *testing.T, obj map[string]any, field, prefix string) string {
	t.Helper()
	s, _ := obj[field].(string)
	if !strings.HasPrefix(s, prefix) {
		t.Errorf("%s = %q, want an id starting with %q", field, s, prefix)
	}
	return s
}

func wantInList(t *testing.T, r response, id string) map[string]any {
	t.Helper()
	wantStatus(t, r, 200)
	if _, ok := r.body["nextCursor"]; !ok {
		t.Error("list answer has no nextCursor")
	}
	for _, it := range r.list() {
		if it["id"] == id {
			return it
		}
	}
	t.Fatalf("%s is not in the list: %v", id, r.body)
	return nil
}

var cases = map[string]sampleCase{
	"offers-create": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		id := wantPrefix(t, r.body, "id", "off_")
		wantField(t, r.body, "brandId", f.brand.ID)
		wantField(t, r.body, "name", "Spring Sale – Trail Running Shoes")
		wantField(t, r.body, "approval", "manual")
		wantField(t, r.body, "holdHours", 72)
		wantField(t, r.body, "currency", "EUR")
		if _, err := f.svc.Offers.Offer(t.Context(), f.brand.ID, id); err != nil {
			t.Errorf("the created offer cannot be read back: %v", err)
		}
	}},
	"webhooks-create": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		wantField(t, r.body, "hasSecret", true)
		if id, _ := r.body["id"].(string); !strings.HasPrefix(id, "sub_") {
			t.Errorf("id = %q, want sub_…", id)
		}
		if _, ok := r.body["secret"]; ok {
			t.Error("the answer shows the secret")
		}
	}},
	"webhooks-events": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		if n := len(r.list()); n != len(catalog.Events()) {
			t.Errorf("%d events listed, want %d", n, len(catalog.Events()))
		}
	}},
	"deliveries-list": {
		setup: func(t *testing.T, f *fixture) {
			url := "https://hooks.example.com/tally"
			if _, err := f.svc.Endpoints.CreateSubscription(t.Context(), f.brand.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventPartnerApplied}}); err != nil {
				t.Fatal(err)
			}
			f.appliedPartner(t, "Hook Reviews", "team@hookreviews.example")
			evts, _, err := f.svc.Events.Events(t.Context(), f.brand.ID, records.ListParams{})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evts {
				if _, err := f.svc.Webhooks.FanOut(t.Context(), e.ID); err != nil {
					t.Fatal(err)
				}
			}
		},
		api: func(t *testing.T, f *fixture, call func() response) {
			r := call()
			wantStatus(t, r, 200)
			ds := r.list()
			if len(ds) != 2 { // the fixture's partner applied too
				t.Errorf("%d deliveries, want one per partner.applied: %v", len(ds), ds)
			}
			for _, d := range ds {
				if d["event"] != tally.EventPartnerApplied || d["status"] != "pending" {
					t.Errorf("delivery %v, want a pending partner.applied", d)
				}
			}
		},
	},
	"keys-create": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		id := wantPrefix(t, r.body, "id", "key_")
		wantField(t, r.body, "name", "Order system")
		secret := wantPrefix(t, r.body, "key", "tally_sk_")
		if _, err := f.svc.Identity.Authenticate(t.Context(), secret); err != nil {
			t.Errorf("the new key %s does not authenticate: %v", id, err)
		}
	}},
	"keys-list": {api: func(t *testing.T, f *fixture, call func() response) {
		k := wantInList(t, call(), f.keyID)
		if k["lastUsedAt"] == nil {
			t.Errorf("the key that listed the keys shows no lastUsedAt: %v", k)
		}
		if _, ok := k["key"]; ok {
			t.Errorf("the list shows a secret: %v", k)
		}
	}},
	"dashboard-signin": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		if !strings.Contains(r.page, `action="/dashboard/sign-in"`) || len(r.cookies) != 1 || !strings.Contains(r.cookies[0], "; Secure") ||
			!strings.Contains(r.cookies[0], "HttpOnly") || !strings.Contains(r.cookies[0], "SameSite=Lax") {
			t.Errorf("sign-in page: cookies %q (want HttpOnly, SameSite=Lax and Secure: API Gateway is https), page %.300s", r.cookies, r.page)
		}
		if csp := r.header("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("Content-Security-Policy %q", csp)
		}
	}},
	"dashboard-overview": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call() // no session: to the sign-in page
		wantStatus(t, r, 303)
		if r.header("Location") != "/dashboard/sign-in?next=%2Fdashboard" {
			t.Errorf("Location %q", r.header("Location"))
		}
	}},
	"dashboard-portal": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		if !strings.Contains(r.page, `action="/portal/sign-in"`) || len(r.cookies) != 1 || !strings.Contains(r.cookies[0], "; Secure") ||
			!strings.Contains(r.cookies[0], "HttpOnly") || !strings.Contains(r.cookies[0], "SameSite=Lax") {
			t.Errorf("the portal's sign-in page: cookies %q, page %.300s", r.cookies, r.page)
		}
	}},
	"dashboard-apply": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		if !strings.Contains(r.page, "Partner with Northwind Running") || !strings.Contains(r.page, `action="/apply/`+f.brand.ID+`"`) {
			t.Errorf("application page: %.500s", r.page)
		}
	}},
	"offers-list": {api: func(t *testing.T, f *fixture, call func() response) {
		wantInList(t, call(), f.offer.ID)
	}},
	"offers-get": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		wantField(t, r.body, "id", f.offer.ID)
		wantField(t, r.body, "status", "active")
	}},
	"partners-list": {api: func(t *testing.T, f *fixture, call func() response) {
		p := wantInList(t, call(), f.partner.ID)
		wantField(t, p, "status", "active")
	}},
	"partners-get": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		wantField(t, r.body, "id", f.partner.ID)
		wantField(t, r.body, "email", "hello@traildeals.example")
	}},
	"partners-postback": {
		setup: func(t *testing.T, f *fixture) {
			f.vars["TALLY_PARTNER_ID"] = f.activePartner(t, "Cashback Club", "team@cashback.example").ID
		},
		api: func(t *testing.T, f *fixture, call func() response) {
			r := call()
			wantStatus(t, r, 200)
			wantField(t, r.body, "partnerId", f.vars["TALLY_PARTNER_ID"])
			wantField(t, r.body, "status", "enabled")
			pb, err := f.svc.Endpoints.Postback(t.Context(), f.brand.ID, f.vars["TALLY_PARTNER_ID"])
			if err != nil || !strings.Contains(pb.URL, "{click_id}") || len(pb.Events) != 2 {
				t.Errorf("the stored postback: %+v, %v", pb, err)
			}
		},
	},
	"partners-invite": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		if u, _ := r.body["inviteUrl"].(string); !strings.HasPrefix(u, "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/portal/invite/") || r.body["expiresAt"] == nil {
			t.Errorf("invitation %v: want a link on the API's https host", r.body)
		}
		if r.header("Cache-Control") != "no-store" {
			t.Errorf("Cache-Control %q", r.header("Cache-Control"))
		}
	}},
	"partners-approve": {
		setup: func(t *testing.T, f *fixture) {
			f.vars["TALLY_PARTNER_ID"] = f.appliedPartner(t, "Run Reviews", "team@runreviews.example").ID
		},
		api: func(t *testing.T, f *fixture, call func() response) {
			r := call()
			wantStatus(t, r, 200)
			wantField(t, r.body, "id", f.vars["TALLY_PARTNER_ID"])
			wantField(t, r.body, "status", "active")
			r = call()
			wantStatus(t, r, 409)
			if r.errorCode() != "invalid_transition" {
				t.Errorf("approving again: code %q, want invalid_transition", r.errorCode())
			}
		},
	},
	"conversions-create": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		id := wantPrefix(t, r.body, "id", "cnv_")
		wantField(t, r.body, "offerId", f.offer.ID)
		wantField(t, r.body, "partnerId", f.partner.ID)
		wantField(t, r.body, "status", "approved")
		wantField(t, r.body, "revenueCents", 8990)
		wantField(t, r.body, "externalTxnId", "order-100234")
		wantField(t, r.body, "sub1", "newsletter-nov")
		// The advertiser's retry of the same postback creates nothing.
		r = call()
		wantStatus(t, r, 200)
		wantField(t, r.body, "id", id)
	}},
	"conversions-list": {api: func(t *testing.T, f *fixture, call func() response) {
		c := wantInList(t, call(), f.conversion.ID)
		wantField(t, c, "status", "approved")
	}},
	"conversions-get": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		wantField(t, r.body, "id", f.conversion.ID)
		wantField(t, r.body, "externalTxnId", "fixture-1")
	}},
	"conversions-approve": {
		setup: func(t *testing.T, f *fixture) {
			c := f.recordConversion(t, f.createOffer(t, tally.ApprovalManual, 0), "manual-1")
			if c.Status != tally.ConversionPending {
				t.Fatalf("setup: conversion is %s, want pending", c.Status)
			}
			f.vars["TALLY_CONVERSION_ID"] = c.ID
		},
		api: func(t *testing.T, f *fixture, call func() response) {
			r := call()
			wantStatus(t, r, 200)
			wantField(t, r.body, "id", f.vars["TALLY_CONVERSION_ID"])
			wantField(t, r.body, "status", "approved")
			r = call()
			wantStatus(t, r, 409)
			if r.errorCode() != "invalid_transition" {
				t.Errorf("approving again: code %q, want invalid_transition", r.errorCode())
			}
		},
	},
	"reports-get": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		if g := fmt.Sprint(r.body["groupBy"]); g != "[day offer]" {
			t.Errorf("groupBy = %s, want [day offer]", g)
		}
		rows := r.list()
		if len(rows) != 1 {
			t.Fatalf("rows = %v, want the fixture's one conversion", rows)
		}
		wantField(t, rows[0], "offerId", f.offer.ID)
		wantField(t, rows[0], "day", f.conversion.CreatedAt.Time.Format(time.DateOnly))
		wantField(t, rows[0], "conversions", 1)
		wantField(t, rows[0], "approved", 1)
		wantField(t, rows[0], "revenueCents", 4500)
		wantField(t, rows[0], "profitCents", 4500-1200)
	}},
	"payouts-create": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		wantPrefix(t, r.body, "id", "pay_")
		wantField(t, r.body, "currency", "EUR")
		wantField(t, r.body, "totalCents", 1200)
		wantField(t, r.body, "status", "pending")
		// Everything owed is in it: a second payout finds nobody owed.
		wantStatus(t, call(), 422)
	}},
	"health-ready": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 200)
		wantField(t, r.body, "status", "ok")
	}},
	"applications-create": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 201)
		id := wantPrefix(t, r.body, "id", "prt_")
		wantField(t, r.body, "brandId", f.brand.ID)
		wantField(t, r.body, "status", "applied")
		wantField(t, r.body, "email", "jane@runner-media.example")
		if got := r.header("X-RateLimit-Limit"); got != strconv.Itoa(httpapi.DefaultApplicationRateLimit) {
			t.Errorf("X-RateLimit-Limit = %q, want the per-IP application limit %d", got, httpapi.DefaultApplicationRateLimit)
		}
		if p, err := f.svc.Partners.Partner(t.Context(), f.brand.ID, id); err != nil || p.Status != tally.PartnerApplied {
			t.Errorf("the brand does not see the application: %v %v", p, err)
		}
		r = call()
		wantStatus(t, r, 409)
		if r.errorCode() != "conflict" {
			t.Errorf("applying again: code %q, want conflict", r.errorCode())
		}
	}},
	// An advertiser's GET postback, with the brand's postback token.
	"conversions-postback": {
		api: func(t *testing.T, f *fixture, call func() response) {
			r := call()
			wantStatus(t, r, 201)
			id := wantPrefix(t, r.body, "conversionId", "cnv_")
			wantField(t, r.body, "duplicate", false)
			c, err := f.svc.Conversions.Conversion(t.Context(), f.brand.ID, id)
			if err != nil || c.ClickID != f.vars["TALLY_CLICK_ID"] || c.RevenueCents != 8990 || c.Currency != "EUR" || c.Sub1 != "spring" || c.ExternalTxnID != "order-200817" {
				t.Errorf("conversion %+v (%v)", c, err)
			}
			r = call()
			wantStatus(t, r, 200)
			wantField(t, r.body, "conversionId", id)
			wantField(t, r.body, "duplicate", true)
		},
	},
	// The tracking link: API Gateway's sourceIp is the visitor, whatever
	// X-Forwarded-For claims.
	"click-follow": {onAWS: true, api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 302)
		loc := r.header("Location")
		clickID, ok := strings.CutPrefix(loc, "https://shop.example.com/trail?click=")
		if !ok || r.header("Cache-Control") != "no-store" {
			t.Fatalf("Location %q, Cache-Control %q", loc, r.header("Cache-Control"))
		}
		c, err := f.svc.Clicks.Click(t.Context(), f.brand.ID, clickID)
		if err != nil {
			t.Fatalf("the click %q cannot be read back: %v", clickID, err)
		}
		if c.IP != "203.0.113.24" || c.PartnerID != f.partner.ID || c.Sub1 != "spring-sale" || c.Sub2 != "email" ||
			c.Referer != "https://trailblog.example/best-shoes" || !strings.HasPrefix(c.UserAgent, "Mozilla/5.0 (iPhone") {
			t.Errorf("stored click %+v", c)
		}
	}},
	"fraud-clicks": {
		setup: func(t *testing.T, f *fixture) {
			c, _, err := f.svc.Clicks.RecordClick(t.Context(), clicks.ClickInput{OfferID: f.offer.ID, PartnerID: f.partner.ID,
				IP: netip.MustParseAddr("198.51.100.7"), UserAgent: "Mozilla/5.0"})
			if err != nil {
				t.Fatal(err)
			}
			f.vars["TALLY_CLICK_ID"] = c.ID // not in the sample; kept for the check
		},
		api: func(t *testing.T, f *fixture, call func() response) {
			c := wantInList(t, call(), f.vars["TALLY_CLICK_ID"])
			wantField(t, c, "ip", "198.51.100.7")
			wantField(t, c, "fraudScore", 0)
		},
	},
	// The $default route: what no other function's route matches.
	"fallback-unknown": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 404)
		if r.errorCode() != "not_found" || !strings.Contains(r.errorMessage(), "GET /api/v1/campaigns") {
			t.Errorf("error %v, want not_found naming GET /api/v1/campaigns", r.body)
		}
		if r.header("Allow") != "" {
			t.Errorf("Allow = %q for an unknown path", r.header("Allow"))
		}
	}},
	"fallback-method": {api: func(t *testing.T, f *fixture, call func() response) {
		r := call()
		wantStatus(t, r, 405)
		if r.errorCode() != "method_not_allowed" || r.header("Allow") != "GET, PATCH" {
			t.Errorf("error %v, Allow %q; want method_not_allowed with Allow: GET, PATCH", r.body, r.header("Allow"))
		}
		if _, err := f.svc.Offers.Offer(t.Context(), f.brand.ID, f.offer.ID); err != nil {
			t.Errorf("the offer is gone: %v", err)
		}
	}},
	"approver-scheduled": {
		setup: func(t *testing.T, f *fixture) {
			o := f.createOffer(t, tally.ApprovalManual, 2)
			f.conversion = f.recordConversion(t, o, "held-1")
			if f.conversion.ApproveAt == nil {
				t.Fatal("setup: a conversion of a 2-hour hold offer has no approveAt")
			}
		},
		approver: func(t *testing.T, f *fixture, call func() (approve.Result, error)) {
			status := func() string {
				c, err := f.svc.Conversions.Conversion(t.Context(), f.brand.ID, f.conversion.ID)
				if err != nil {
					t.Fatal(err)
				}
				return c.Status
			}
			f.clock.Add(time.Hour)
			if res, err := call(); err != nil || res.Approved != 0 {
				t.Fatalf("an hour into a 2-hour hold: approved %d (err %v), want 0", res.Approved, err)
			}
			if s := status(); s != tally.ConversionPending {
				t.Fatalf("an hour into a 2-hour hold the conversion is %s", s)
			}
			f.clock.Add(time.Hour + time.Second)
			res, err := call()
			if err != nil || res.Approved != 1 {
				t.Fatalf("after the hold: approved %d (err %v), want 1", res.Approved, err)
			}
			if s := status(); s != tally.ConversionApproved {
				t.Errorf("after the hold the conversion is %s, want approved", s)
			}
			lines := f.logs.take(t)
			last := lines[len(lines)-1]
			if last["msg"] != "hold-time approval" || last["approved"] != float64(1) {
				t.Errorf("log line = %v, want msg \"hold-time approval\" with approved 1", last)
			}
			if last["eventId"] != "53dc4d37-cffa-4f76-80c9-8b7d4a4d2eaa" || last["awsRequestId"] == nil {
				t.Errorf("log line = %v, want the scheduled event's id and the invocation's awsRequestId", last)
			}
		},
	},
}

// TestFunctionsAreCovered checks that the functions, the samples and this
// test agree: every function has a sample, every sample belongs to a
// function and has a case here, and every route group is served by exactly
// one function.
func TestFunctionsAreCovered(t *testing.T) {
	fns := functions(t)
	all := samples(t)
	names := map[string]bool{}
	served := map[string][]string{}
	for _, fn := range fns {
		names[fn.name] = true
		if len(samplesOf(fn.name, all)) == 0 {
			t.Errorf("functions/%s has no sample: add events/%s-<action>.json and a case in this test", fn.name, fn.name)
		}
		if fn.kind == kindAPI {
			if _, err := api.APIHandler(httpapi.Services{}, httpapi.Config{Dashboard: dashboard.New(httpapi.Services{}, httpapi.Config{})}, fn.groups...); err != nil {
				t.Errorf("functions/%s: %v", fn.name, err)
			}
		}
		for _, name := range samplesOf(fn.name, all) {
			if c, ok := cases[name]; ok && !c.fits(fn.kind) {
				t.Errorf("the case for %s does not check a sample of functions/%s (lambdafn.%s)", name, fn.name, fn.kind)
			}
		}
		for _, g := range fn.groups {
			served[g] = append(served[g], fn.name)
		}
	}
	for name := range all {
		fn, _, _ := strings.Cut(name, "-")
		if !names[fn] {
			t.Errorf("events/%s.json belongs to no function (name it <function>-<action>.json)", name)
		}
		if _, ok := cases[name]; !ok {
			t.Errorf("events/%s.json has no case in this test", name)
		}
	}
	for name := range cases {
		if _, ok := all[name]; !ok {
			t.Errorf("the case %q has no events/%s.json", name, name)
		}
	}
	for _, g := range allGroups {
		if g == httpapi.GroupAdmin {
			continue
		}
		if len(served[g]) != 1 {
			t.Errorf("route group %q is served by functions %v, want exactly one", g, served[g])
		}
	}

	// Every placeholder the samples use is described in events/README.md.
	readme, err := os.ReadFile(filepath.Join(eventsDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for name, raw := range all {
		for _, m := range sfntest.Placeholder.FindAllSubmatch(raw, -1) {
			if !bytes.Contains(readme, m[0]) {
				t.Errorf("events/%s.json uses %s, which events/README.md does not describe", name, m[0])
			}
		}
	}
}

// TestSamples runs every sample through the handler its function's main
// builds, on both stores. On DynamoDB Local it records the DynamoDB
// actions the handler makes and checks the function's role in
// template.yaml allows each of them.
func TestSamples(t *testing.T) {
	all := samples(t)
	tpl := template(t)
	for _, fn := range functions(t) {
		for _, name := range samplesOf(fn.name, all) {
			c, ok := cases[name]
			if !ok {
				t.Errorf("events/%s.json has no case in this test", name)
				continue
			}
			t.Run(name, func(t *testing.T) {
				forEachRecordedStore(t, func(t *testing.T, st store.Store, used *usedActions) {
					if used != nil {
						defer used.allowedFor(t, tpl, fn.name)
					}
					var opts []service.Option
					if c.onAWS {
						opts = append(opts, service.OnAWS())
					}
					f := newFixture(t, st, opts...)
					if c.setup != nil {
						c.setup(t, f)
					}
					raw := sfntest.Substitute(t, all[name], f.vars)
					if !c.fits(fn.kind) {
						t.Fatalf("the case for %s does not fit functions/%s", name, fn.name)
					}
					switch fn.kind {
					case kindApprover:
						h := approve.Handler(f.svc.Conversions, f.cfg.Logger)
						ev := decodeEvent[events.EventBridgeEvent](t, raw)
						f.logs.take(t)
						c.approver(t, f, func() (approve.Result, error) {
							return h(lambdaContext(t, "approver-invocation"), ev)
						})
					case kindAPI:
						h := apiHandler(t, f, fn.groups)
						ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, raw)
						c.api(t, f, func() response {
							r := invokeAPI(t, f, h, ev)
							checkCommon(t, r, ev, fn)
							return r
						})
					case kindFanout:
						c.fanout(t, f, decodeEvent[events.DynamoDBEvent](t, raw), fanoutCall(t, f))
					case kindDeliver:
						c.deliver(t, f, decodeEvent[events.SQSEvent](t, raw), deliverCall(t, f))
					case kindAttempt:
						c.attempt(t, f, decodeEvent[attempt.RetryInput](t, raw), attemptCall(t, f))
					case kindReconciler:
						q := f.deliveryQueue(t)
						h := fanout.DefaultReconciler.Handler(f.svc.Webhooks, q.client, q.URL, f.cfg.Logger)
						ev := decodeEvent[events.EventBridgeEvent](t, raw)
						c.reconciler(t, f, func() (fanout.ReconcilerResult, error) {
							return h(lambdaContext(t, "reconciler-invocation"), ev)
						})
					case kindRollup:
						h := rollup.Handler(f.svc.Reports, f.cfg.Logger)
						c.rollup(t, f, decodeEvent[events.DynamoDBTimeWindowEvent](t, raw), func(ev events.DynamoDBTimeWindowEvent) error {
							resp, err := h(lambdaContext(t, "rollup-invocation"), ev)
							if resp.State == nil {
								t.Error("the answer has no state: Lambda takes that for a failure")
							}
							return err
						})
					}
				})
			})
		}
	}
}

// checkCommon checks what every API answer through fn carries, the
// fallback's included: every answer is counted against a rate limit.
func checkCommon(t *testing.T, r response, ev events.APIGatewayV2HTTPRequest, fn function) {
	t.Helper()
	if !strings.HasPrefix(r.header("X-Request-Id"), "req_") {
		t.Errorf("X-Request-Id = %q", r.header("X-Request-Id"))
	}
	pages := slices.Equal(fn.groups, []string{httpapi.GroupDashboard}) // pages count sign-ins and forms only
	// The tracking link and the health probes count nothing.
	uncounted := slices.Equal(fn.groups, []string{httpapi.GroupClick}) || slices.Equal(fn.groups, []string{httpapi.GroupHealth})
	switch limit := r.header("X-RateLimit-Limit"); {
	case uncounted && limit != "":
		t.Errorf("X-RateLimit-Limit = %q from functions/%s, which counts nothing", limit, fn.name)
	case limit == "" && !pages && !uncounted:
		t.Errorf("no X-RateLimit-Limit header from functions/%s", fn.name)
	}
	var line map[string]any
	for _, l := range r.logs {
		if isRequestLine(l) {
			line = l
		}
	}
	_, metered := line["_aws"]
	switch {
	case line == nil:
		t.Errorf("no request log line in %v", r.logs)
	case line["requestId"] != r.header("X-Request-Id"):
		t.Errorf("log line %v lacks the X-Request-Id", line)
	case !traceID.MatchString(fmt.Sprint(line["traceId"])):
		t.Errorf("log line traceId = %v, want the trace the request started", line["traceId"])
	case metered && line["code"] != strconv.Itoa(r.status):
		t.Errorf("log line code %v, answer %d", line["code"], r.status)
	case metered:
		emfSamples(t, fmt.Sprintln(mustJSON(t, line)))
	case line["apigwRequestId"] != ev.RequestContext.RequestID:
		t.Errorf("log line apigwRequestId = %v, want requestContext.requestId %q", line["apigwRequestId"], ev.RequestContext.RequestID)
	case line["awsRequestId"] == nil:
		t.Errorf("log line %v lacks the invocation's awsRequestId", line)
	case line["status"] != float64(r.status):
		t.Errorf("log line status %v, answer %d", line["status"], r.status)
	}
}

// isRequestLine reports whether a log record is a request's line: the
// logger's ("request"), or, from a function whose metrics write it, its
// EMF line, with the request's metrics and fields.
func isRequestLine(rec map[string]any) bool {
	_, metered := rec["tally_http_requests_total"]
	return rec["msg"] == "request" || metered && rec["requestId"] != nil
}

var traceID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestOtherFunctionsRoutes checks that a function answers only its own
// routes: every API sample of another function answers 404 through it.
// Through the fallback, which knows every route but serves none, each
// answers 405 with an Allow naming its method; the fallback's own samples
// are no function's route and answer 404 or 405 through any of them.
func TestOtherFunctionsRoutes(t *testing.T) {
	all := samples(t)
	fns := functions(t)
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		f.cfg.RateLimit = 10_000 // every answer counts against the key, 404s and 405s too
		for _, fn := range fns {
			if fn.kind != kindAPI {
				continue
			}
			h := apiHandler(t, f, fn.groups)
			for _, other := range fns {
				if other.name == fn.name || other.kind != kindAPI {
					continue
				}
				for _, name := range samplesOf(other.name, all) {
					ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, all[name], f.vars))
					r := invokeAPI(t, f, h, ev)
					method := ev.RequestContext.HTTP.Method
					switch {
					case fn.isFallback():
						if r.status != 405 || r.errorCode() != "method_not_allowed" || !slices.Contains(strings.Split(r.header("Allow"), ", "), method) {
							t.Errorf("%s through functions/%s: %d %v Allow %q, want 405 method_not_allowed allowing %s",
								name, fn.name, r.status, r.body, r.header("Allow"), method)
						}
					case other.isFallback():
						if (r.status != 404 || r.errorCode() != "not_found") && (r.status != 405 || r.errorCode() != "method_not_allowed") {
							t.Errorf("%s through functions/%s: %d %v, want 404 not_found or 405 method_not_allowed", name, fn.name, r.status, r.body)
						}
					case r.status != 404 || r.errorCode() != "not_found":
						t.Errorf("%s through functions/%s: %d %v, want 404 not_found", name, fn.name, r.status, r.body)
					}
				}
			}
		}
	})
}

// TestFallbackCountsLikeTheRoutes runs the fallback as API Gateway's
// $default route: every answer is in the error shape and carries the
// rate-limit headers; where routes take a key, the key is checked first and
// the answer counted against it.
func TestFallbackCountsLikeTheRoutes(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		h := apiHandler(t, f, []string{httpapi.GroupFallback})
		base := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, samples(t)["fallback-unknown"], f.vars))
		for _, c := range []struct {
			method, path string
			key          bool
			status       int
			allow        string
		}{
			{"GET", "/api/v1/campaigns", true, 404, ""},
			{"GET", "/api/v1/campaigns", false, 401, ""},
			{"GET", "/", false, 404, ""},
			{"DELETE", "/api/v1/offers", true, 405, "GET, POST"},
			{"DELETE", "/api/v1/offers", false, 401, ""},
			{"PUT", "/api/public/webhooks/sub_01jd0000000000000000000000", true, 405, "GET, PATCH, DELETE"},
			// A route of another function: API Gateway never sends it here.
			{"GET", "/api/v1/reports", true, 405, "GET"},
			// The local server's admin API is not deployed.
			{"POST", "/_admin/brands", false, 404, ""},
		} {
			ev := base
			ev.RawPath, ev.RequestContext.HTTP.Path, ev.RequestContext.HTTP.Method = c.path, c.path, c.method
			ev.RawQueryString, ev.QueryStringParameters = "", nil
			ev.Headers = maps.Clone(ev.Headers)
			if !c.key {
				delete(ev.Headers, "authorization")
			}
			r := invokeAPI(t, f, h, ev)
			if r.status != c.status || r.header("Allow") != c.allow || r.errorCode() == "" || r.header("X-RateLimit-Remaining") == "" {
				t.Errorf("%s %s (key %v): %d %v Allow %q X-RateLimit-Remaining %q, want %d in the error shape, Allow %q, with rate-limit headers",
					c.method, c.path, c.key, r.status, r.body, r.header("Allow"), r.header("X-RateLimit-Remaining"), c.status, c.allow)
			}
		}
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestApplicationRateLimitBySourceIP checks that the application form's
// limit counts requestContext.http.sourceIp, IPv4 and IPv6, and not the
// X-Forwarded-For header a client can write.
func TestApplicationRateLimitBySourceIP(t *testing.T) {
	raw := samples(t)["applications-create"]
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		f.cfg.ApplicationRateLimit = 2
		h := apiHandler(t, f, []string{httpapi.GroupApplications})
		n := 0
		apply := func(sourceIP, forwardedFor string) response {
			t.Helper()
			n++
			ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, raw, f.vars))
			ev.RequestContext.HTTP.SourceIP = sourceIP
			ev.Headers["x-forwarded-for"] = forwardedFor
			ev.Body = strings.Replace(ev.Body, "jane@", fmt.Sprintf("jane%d@", n), 1)
			return invokeAPI(t, f, h, ev)
		}
		for _, ip := range []string{"192.0.2.41", "2001:db8::41"} {
			for i := range 2 {
				if r := apply(ip, ip); r.status != 201 {
					t.Fatalf("application %d from %s: %d %v, want 201", i+1, ip, r.status, r.body)
				}
			}
			r := apply(ip, "198.51.100."+strconv.Itoa(n))
			if r.status != 429 || r.errorCode() != "rate_limit_exceeded" || r.header("Retry-After") == "" {
				t.Errorf("third application from %s (another X-Forwarded-For): %d %v Retry-After %q, want 429 rate_limit_exceeded",
					ip, r.status, r.body, r.header("Retry-After"))
			}
			if got := r.header("X-RateLimit-Remaining"); got != "0" {
				t.Errorf("X-RateLimit-Remaining = %q, want 0", got)
			}
		}
	})
}

// TestNamedStage checks that a stage's segment in front of the path (the
// execute-api endpoint of a stage other than $default) is stripped, and
// that a custom domain's path is left alone.
func TestNamedStage(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	h := apiHandler(t, f, []string{httpapi.GroupOffers})
	raw := sfntest.Substitute(t, samples(t)["offers-get"], f.vars)
	path := "/api/v1/offers/" + f.offer.ID

	ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, raw)
	ev.RequestContext.Stage = "prod"
	ev.RawPath, ev.RequestContext.HTTP.Path = "/prod"+path, "/prod"+path
	r := invokeAPI(t, f, h, ev)
	wantStatus(t, r, 200)
	wantField(t, r.body, "id", f.offer.ID)
	if line := r.logs[len(r.logs)-1]; line["path"] != path {
		t.Errorf("logged path %v, want %s", line["path"], path)
	}

	ev = decodeEvent[events.APIGatewayV2HTTPRequest](t, raw)
	ev.RequestContext.Stage = "api"
	ev.RequestContext.DomainName = "track.example.com"
	wantStatus(t, invokeAPI(t, f, h, ev), 200)
}

// TestUnreadableEvent checks that events that make no HTTP request still
// answer in the API's error shape instead of failing the invocation.
func TestUnreadableEvent(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	h := apiHandler(t, f, []string{httpapi.GroupOffers})
	raw := sfntest.Substitute(t, samples(t)["offers-create"], f.vars)

	ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, raw)
	ev.IsBase64Encoded = true
	r := invokeAPI(t, f, h, ev)
	if r.status != 400 || r.errorCode() != "invalid_json" {
		t.Errorf("body marked base64 that is not: %d %v, want 400 invalid_json", r.status, r.body)
	}

	ev = decodeEvent[events.APIGatewayV2HTTPRequest](t, raw)
	ev.RawPath = "/api/v1/offers/%zz"
	r = invokeAPI(t, f, h, ev)
	if r.status != 404 || r.errorCode() != "not_found" {
		t.Errorf("path with a bad escape: %d %v, want 404 not_found", r.status, r.body)
	}
}

func TestAPIHandlerGroups(t *testing.T) {
	svc := servicetest.New(nil)
	for _, groups := range [][]string{nil, {httpapi.GroupAdmin}, {"offer"}, {httpapi.GroupOffers, "reprots"},
		// The fallback serves nothing, so it would hide the offers routes.
		{httpapi.GroupOffers, httpapi.GroupFallback}, {httpapi.GroupFallback, httpapi.GroupFallback}} {
		if _, err := api.APIHandler(svc.API(), httpapi.Config{}, groups...); err == nil {
			t.Errorf("APIHandler(%q) accepted the groups", groups)
		}
	}
	for _, groups := range [][]string{{httpapi.GroupFallback}, {httpapi.GroupOffers, httpapi.GroupReports}} {
		if _, err := api.APIHandler(svc.API(), httpapi.Config{}, groups...); err != nil {
			t.Errorf("APIHandler(%q): %v", groups, err)
		}
	}
}

// TestSetup checks the environment a function starts from: TALLY_TABLE is
// required, settings are checked, and a table reached through the standard
// AWS variables works.
func TestSetup(t *testing.T) {
	home := t.TempDir()
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(home, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(home, "credentials"))
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "tally")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "tally")
	log := slog.New(slog.DiscardHandler)

	t.Setenv("TALLY_TABLE", "")
	if _, err := lambdafn.OpenDB(); err == nil || !strings.Contains(err.Error(), "TALLY_TABLE") {
		t.Errorf("without TALLY_TABLE: err %v, want one naming TALLY_TABLE", err)
	}
	t.Setenv("TALLY_TABLE", "tally")
	t.Setenv("TALLY_RATE_LIMIT", "lots")
	if _, err := httpapi.ConfigFromEnv(log); err == nil || !strings.Contains(err.Error(), "TALLY_RATE_LIMIT") {
		t.Errorf("with TALLY_RATE_LIMIT=lots: err %v, want one naming TALLY_RATE_LIMIT", err)
	}
	t.Setenv("TALLY_RATE_LIMIT", "250")

	_, table := dynamotest.NewTable(t)
	t.Setenv("TALLY_TABLE", table)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dynamotest.Endpoint(t))
	db, err := lambdafn.OpenDB()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := httpapi.ConfigFromEnv(log)
	if err != nil {
		t.Fatal(err)
	}
	settings, err := app.ReadSettings()
	if err != nil {
		t.Fatal(err)
	}
	svc := api.Services(db, settings)
	if cfg.RateLimit != 250 {
		t.Errorf("RateLimit = %d, want 250 from TALLY_RATE_LIMIT", cfg.RateLimit)
	}
	b, err := svc.Identity.CreateBrand(t.Context(), "Setup Check")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Identity.Brand(t.Context(), b.ID); err != nil {
		t.Errorf("the brand written through the function's store cannot be read: %v", err)
	}
}
