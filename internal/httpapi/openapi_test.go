package httpapi_test

// The contract test: docs/openapi.yaml against the real handler.
//
// Validator: github.com/getkin/kin-openapi, pinned at v0.152.0 in go.mod. It
// supports OpenAPI 3.1 fully enough for a strict check: its loader keeps the
// 3.1 schema keywords (type arrays with "null", const, if/then, examples),
// (*openapi3.T).Validate checks a 3.1 document by 3.1 rules, and for 3.1
// documents openapi3filter validates bodies, parameters and headers with a
// JSON Schema 2020-12 validator (santhosh-tekuri/jsonschema/v6) that asserts
// the formats kin-openapi knows (date, date-time). So the document is loaded
// strictly, as the 3.1 document it is, with no lenient mode. routers/gorillamux
// maps requests to operations.
//
// Every request of the session is checked with ValidateRequest (and must
// pass, or must fail when the call is meant to break the document) and every
// answer with ValidateResponse, with IncludeResponseStatus so that a status
// the document does not list fails too. Response schemas are closed
// (additionalProperties: false) and list their required fields, so a field
// added or dropped by a handler fails the test. At the end, every (operation,
// status) pair the document lists must have been seen, except 500, which a
// healthy server cannot be made to answer.
//
// The document's top-level `webhooks` section describes what Tally sends to
// a subscription's URL. The session subscribes receivers on loopback before
// anything else, so that the events it causes are delivered; it makes the
// deliveries itself, with the real sender but without the pipeline's waits
// (oasDeliverAll), and checks every request a receiver got against the
// webhooks entry of its event: headers, content type and body. Every entry
// must have been delivered (oas_catalog_test.go also keeps the document's
// copies of the catalog's schemas equal to the files).

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/catalog/schemacheck"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// oasPath is the document, relative to this package.
const oasPath = "../../docs/openapi.yaml"

// oasHeaders are response headers that must appear only where the document
// lists them (ValidateResponse checks only that listed ones are present).
var oasHeaders = []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "Retry-After", "Allow", "WWW-Authenticate"}

// oasContract is the loaded document and what a session has checked against it.
type oasContract struct {
	t      *testing.T
	doc    *openapi3.T
	router routers.Router
	server string // the document's server URL, which validation requests use
	opts   *openapi3filter.Options
	seen   map[string]map[int]bool // operationId -> statuses answered
	calls  int                     // exchanges checked
}

func loadOASContract(t *testing.T) *oasContract {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(oasPath)
	if err != nil {
		t.Fatalf("load %s: %v", oasPath, err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("%s is OpenAPI %s; want 3.1", oasPath, doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context, openapi3.EnableExamplesValidation()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", oasPath, err)
	}
	if len(doc.Servers) != 1 {
		t.Fatalf("%s: want one server, got %d", oasPath, len(doc.Servers))
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &oasContract{
		t: t, doc: doc, router: router, server: doc.Servers[0].URL,
		seen: map[string]map[int]bool{},
		opts: &openapi3filter.Options{
			IncludeResponseStatus:             true,
			RejectWhenRequestBodyNotSpecified: true,
			SkipSettingDefaults:               true,
			AuthenticationFunc:                oasBearer,
		},
	}
}

// oasBearer accepts any request that carries a bearer token: whether the
// key is good is the server's business, answered with the documented 401.
func oasBearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	if in.SecuritySchemeName != "bearerAuth" {
		return fmt.Errorf("unexpected security scheme %q", in.SecuritySchemeName)
	}
	token, ok := strings.CutPrefix(in.RequestValidationInput.Request.Header.Get("Authorization"), "Bearer ")
	if !ok || strings.TrimSpace(token) == "" {
		return errors.New("no bearer token")
	}
	return nil
}

// oasRaw is a request body sent exactly as written.
type oasRaw string

// oasCall is one request of the session and what it must produce.
type oasCall struct {
	srv         *httptest.Server
	method      string
	path        string // from the host root, with the query
	key         string // API key; "" sends no Authorization
	body        any    // nil, oasRaw, or a value sent as JSON
	contentType string // default application/json when there is a body; "none" sends none
	status      int    // the status the server must answer
	code        string // the error code it must answer; "" for success
	invalid     bool   // the request breaks the document on purpose
}

type oasAnswer struct {
	status int
	header http.Header
	body   []byte
}

func (a oasAnswer) into(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("decode %s: %v", a.body, err)
	}
}

func oasAs[T any](t *testing.T, a oasAnswer) T {
	t.Helper()
	var v T
	a.into(t, &v)
	return v
}

func (c oasCall) String() string {
	s := c.method + " " + c.path
	if c.key == "" {
		s += " (no key)"
	}
	return s
}

func (c oasCall) bodyBytes() ([]byte, error) {
	switch b := c.body.(type) {
	case nil:
		return nil, nil
	case oasRaw:
		return []byte(b), nil
	default:
		return json.Marshal(b)
	}
}

func (c oasCall) request(base string) (*http.Request, error) {
	body, err := c.bodyBytes()
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(c.method, base+c.path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		ct := c.contentType
		if ct == "" {
			ct = "application/json"
		}
		if ct != "none" {
			req.Header.Set("Content-Type", ct)
		}
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	return req, nil
}

// do sends c to its server and checks request and answer against the
// document. It fails the test at once when the answer is not the expected
// one, since later calls depend on it.
func (o *oasContract) do(c oasCall) oasAnswer {
	t := o.t
	t.Helper()
	ctx := t.Context()

	vreq, err := c.request(o.server)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	route, params, routeErr := o.router.FindRoute(vreq)
	var in *openapi3filter.RequestValidationInput
	if routeErr == nil {
		in = &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: o.opts}
		err := openapi3filter.ValidateRequest(ctx, in)
		switch {
		case err != nil && !c.invalid:
			t.Errorf("%s: the request should match the document: %v", c, err)
		case err == nil && c.invalid:
			t.Errorf("%s: the request should break the document, but it matches it", c)
		}
	}

	req, err := c.request(c.srv.URL)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	client := *c.srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse } // tracking links answer 302
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", c, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: read answer: %v", c, err)
	}
	a := oasAnswer{status: resp.StatusCode, header: resp.Header, body: body}
	o.calls++

	if a.status != c.status {
		t.Fatalf("%s: status %d, want %d: %s", c, a.status, c.status, body)
	}
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(body, &e)
	if e.Error.Code != c.code {
		t.Fatalf("%s: error code %q, want %q: %s", c, e.Error.Code, c.code, body)
	}

	if routeErr != nil {
		o.checkUndocumented(c, vreq, routeErr, a)
		return a
	}
	if err := o.checkAnswer(in, a); err != nil {
		t.Errorf("%s: the answer does not match the document: %v\nbody: %s", c, err, body)
	}
	op := route.Operation.OperationID
	if o.seen[op] == nil {
		o.seen[op] = map[int]bool{}
	}
	o.seen[op][a.status] = true
	return a
}

// checkAnswer validates an answer to the request in, and checks that it has
// none of oasHeaders that the document does not list for it.
func (o *oasContract) checkAnswer(in *openapi3filter.RequestValidationInput, a oasAnswer) error {
	rin := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: a.status, Header: a.header, Options: o.opts}
	rin.SetBodyBytes(a.body)
	if err := openapi3filter.ValidateResponse(o.t.Context(), rin); err != nil {
		return err
	}
	documented := in.Route.Operation.Responses.Status(a.status).Value.Headers
	for _, h := range oasHeaders {
		if _, listed := documented[h]; !listed && a.header.Get(h) != "" {
			return fmt.Errorf("header %s is not documented for status %d", h, a.status)
		}
	}
	return nil
}

// checkUndocumented validates the answer to a path the document does not
// have (an UnknownRoute 404) or a method it does not have there (a
// MethodNotAllowed 405), against those components.
func (o *oasContract) checkUndocumented(c oasCall, vreq *http.Request, routeErr error, a oasAnswer) {
	t := o.t
	t.Helper()
	name, status := "UnknownRoute", http.StatusNotFound
	if errors.Is(routeErr, routers.ErrMethodNotAllowed) {
		name, status = "MethodNotAllowed", http.StatusMethodNotAllowed
	} else if !errors.Is(routeErr, routers.ErrPathNotFound) {
		t.Fatalf("%s: find route: %v", c, routeErr)
	}
	if c.status == http.StatusUnauthorized { // where keys are needed, they are checked first
		name, status = "Unauthorized", http.StatusUnauthorized
	}
	if a.status != status {
		t.Errorf("%s: the document does not have this operation (%v), so the answer must be %d, not %d", c, routeErr, status, a.status)
		return
	}
	ref := o.doc.Components.Responses[name]
	if ref == nil {
		t.Fatalf("the document has no components.responses.%s", name)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: vreq,
		Route:   &routers.Route{Spec: o.doc, Operation: &openapi3.Operation{Responses: openapi3.NewResponses(openapi3.WithStatus(status, ref))}},
		Options: o.opts,
	}
	if err := o.checkAnswer(in, a); err != nil {
		t.Errorf("%s: the answer does not match components.responses.%s: %v\nbody: %s", c, name, err, a.body)
	}
}

// unseen lists the documented (operation, status) pairs the session never
// produced, and the operations with no operationId.
func (o *oasContract) unseen() []string {
	var missing []string
	for path, item := range o.doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" {
				missing = append(missing, method+" "+path+": no operationId")
				continue
			}
			for code := range op.Responses.Map() {
				if code == "500" {
					continue // internal errors cannot be provoked from outside
				}
				status, err := strconv.Atoi(code)
				if err != nil || !o.seen[op.OperationID][status] {
					missing = append(missing, op.OperationID+" "+code)
				}
			}
		}
	}
	slices.Sort(missing)
	return missing
}

func (o *oasContract) operations() []string {
	var ops []string
	for _, item := range o.doc.Paths.Map() {
		for _, op := range item.Operations() {
			ops = append(ops, op.OperationID)
		}
	}
	slices.Sort(ops)
	return ops
}

// oasBig is a JSON object just over the 1 MiB body limit.
func oasBig() oasRaw {
	return oasRaw(`{"name":"` + strings.Repeat("a", httpapi.MaxBodyBytes) + `"}`)
}

func TestOpenAPIDocumentMatchesTheHandlers(t *testing.T) {
	o := loadOASContract(t)
	ctx := t.Context()
	st := testenv.Bolt(t)
	quiet := slog.New(slog.DiscardHandler)

	// Receivers run on loopback, which only the local server's setting allows.
	svc := servicetest.New(st, service.WithLoopbackReceivers())
	srv := httptest.NewServer(httpapi.New(svc.API(), httpapi.Config{RateLimit: 1_000_000, ApplicationRateLimit: 1_000_000, Logger: quiet}).Handler())
	t.Cleanup(srv.Close)
	// A second instance over the same store with limits of one request per
	// minute, for the 429s. Its clock stands still, so that its window does
	// not roll over halfway through, and an hour ahead, so that it shares no
	// window with the first instance (the client IP bucket is the same).
	frozen := time.Now().Add(time.Hour)
	limitedSvc := servicetest.New(st, service.WithClock(func() time.Time { return frozen }))
	limited := httptest.NewServer(httpapi.New(limitedSvc.API(), httpapi.Config{RateLimit: 1, ApplicationRateLimit: 1, Logger: quiet}).Handler())
	t.Cleanup(limited.Close)

	brand, err := svc.Identity.CreateBrand(ctx, "Acme Shoes")
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := svc.Identity.CreateAPIKey(ctx, brand.ID)
	if err != nil {
		t.Fatal(err)
	}
	_, limitedKey, err := svc.Identity.CreateAPIKey(ctx, brand.ID)
	if err != nil {
		t.Fatal(err)
	}
	other, err := svc.Identity.CreateBrand(ctx, "Other Brand")
	if err != nil {
		t.Fatal(err)
	}
	_, otherKey, err := svc.Identity.CreateAPIKey(ctx, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	badKey := "tally_sk_" + strings.Repeat("0", 48)
	now := time.Now().UTC()
	today := now.Format(time.DateOnly)
	noOffer, noPartner, noConversion, noBrand := ids.New("off_", now), ids.New("prt_", now), ids.New("cnv_", now), ids.New("brd_", now)

	// call runs a request against the main instance (unless it names
	// another) with the key it names, if any; withKey adds the brand's key.
	call := func(c oasCall) oasAnswer {
		t.Helper()
		if c.srv == nil {
			c.srv = srv
		}
		return o.do(c)
	}
	withKey := func(c oasCall) oasAnswer {
		t.Helper()
		c.key = key
		return call(c)
	}

	// --- Webhook subscriptions, made first so that every event of the
	// session is delivered. The accepting receiver takes every event, signed;
	// the refusing one answers 500 to partner.banned, unsigned; the gone
	// subscription is deleted while a delivery to it is pending.
	accepting := newOASReceiver(t, http.StatusOK, `{"received":true}`)
	refusing := newOASReceiver(t, http.StatusInternalServerError, "receiver down")
	hooks := "/api/public/webhooks"
	secret := "whsec_" + strings.Repeat("7f3a", 6)
	// Every event a subscription may list: all but webhook.test, which
	// its button sends.
	subscribable := slices.DeleteFunc(catalog.Names(), func(n string) bool { return n == tally.EventWebhookTest })
	subAll := oasAs[tally.Subscription](t, withKey(oasCall{method: "POST", path: hooks, status: 201, body: map[string]any{
		"url": accepting.srv.URL + "/tally?source=oas", "events": subscribable, "secret": secret,
	}}))
	subFail := oasAs[tally.Subscription](t, withKey(oasCall{method: "POST", path: hooks, status: 201, body: map[string]any{
		"url": refusing.srv.URL, "events": []string{"partner.banned"},
	}}))
	gone := withKey(oasCall{method: "POST", path: hooks, status: 201, body: map[string]any{
		"url": strings.Replace(accepting.srv.URL, "127.0.0.1", "localhost", 1) + "/gone", "events": []string{"cap.reached"}, "secret": "a secret, with spaces inside",
	}})
	subGone := oasAs[tally.Subscription](t, gone)
	if !subAll.HasSecret || subFail.HasSecret || !slices.Equal(subAll.Events, subscribable) || subAll.BrandID != brand.ID {
		t.Errorf("subscriptions: %+v, %+v", subAll, subFail)
	}
	if strings.Contains(string(gone.body), "secret,") || strings.Contains(string(gone.body), `"secret"`) {
		t.Errorf("a subscription answer shows its secret: %s", gone.body)
	}
	for _, body := range []any{
		map[string]any{"events": []string{"conversion.created"}},
		map[string]any{"url": "ftp://files.example/hooks", "events": []string{"conversion.created"}},
		map[string]any{"url": "https://user:pw@hooks.example.com/tally", "events": []string{"conversion.created"}},
		map[string]any{"url": " https://hooks.example.com/tally", "events": []string{"conversion.created"}},
		map[string]any{"url": "https://hooks.example.com/tally ", "events": []string{"conversion.created"}},
		map[string]any{"url": "https://hooks.example.com/" + strings.Repeat("h", 2048), "events": []string{"conversion.created"}},
		map[string]any{"url": "/tally", "events": []string{"conversion.created"}},
		map[string]any{"url": "https://hooks.example.com/tally"},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{}},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"order.created"}},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"cap.reached", "conversion.created", "cap.reached"}},
		map[string]any{"url": "https://hooks.example.com/tally", "events": "conversion.created"},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"conversion.created"}, "secret": "too-short"},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"conversion.created"}, "secret": strings.Repeat("s", 257)},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"conversion.created"}, "secret": " whsec_0123456789abcdef"},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"conversion.created"}, "secret": "whsec_0123456789abcdef\n"},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"conversion.created"}, "secret": 1234567890123456},
		map[string]any{"url": "https://hooks.example.com/tally", "events": []string{"conversion.created"}, "active": true},
		oasRaw(`["https://hooks.example.com/tally"]`),
	} {
		withKey(oasCall{method: "POST", path: hooks, status: 422, code: "validation_error", invalid: true, body: body})
	}
	// Receiver rules the document states in words only: plain http only to
	// loopback (on the local server), and no private or metadata addresses.
	for _, u := range []string{"http://hooks.example.com/tally", "https://10.1.2.3/tally", "https://169.254.169.254/latest/meta-data/", "https://[fd00:ec2::254]/", "https://hooks.example.com:0/tally"} {
		withKey(oasCall{method: "POST", path: hooks, status: 422, code: "validation_error", body: map[string]any{"url": u, "events": []string{"conversion.created"}}})
	}
	withKey(oasCall{method: "POST", path: hooks, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"url": "https://hooks.example.com/tally"`)})
	withKey(oasCall{method: "POST", path: hooks, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/json"})
	withKey(oasCall{method: "POST", path: hooks, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})

	// At most 50 subscriptions a brand, on a brand of its own.
	busy, err := svc.Identity.CreateBrand(ctx, "Busy Brand")
	if err != nil {
		t.Fatal(err)
	}
	_, busyKey, err := svc.Identity.CreateAPIKey(ctx, busy.ID)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 49 {
		u := fmt.Sprintf("https://hooks.example.com/busy/%d", i)
		if _, err := svc.Endpoints.CreateSubscription(ctx, busy.ID, endpoints.SubscriptionInput{URL: &u, Events: []string{"conversion.created"}}); err != nil {
			t.Fatal(err)
		}
	}
	call(oasCall{method: "POST", path: hooks, key: busyKey, status: 201, body: map[string]any{"url": "https://hooks.example.com/busy/49", "events": []string{"conversion.created"}}})
	call(oasCall{method: "POST", path: hooks, key: busyKey, status: 409, code: "conflict", body: map[string]any{"url": "https://hooks.example.com/busy/50", "events": []string{"conversion.created"}}})
	call(oasCall{method: "POST", path: hooks, key: busyKey, status: 422, code: "validation_error", invalid: true, body: map[string]any{"url": "https://hooks.example.com/busy/50"}})

	subs := oasAs[struct{ Data []tally.Subscription }](t, withKey(oasCall{method: "GET", path: hooks, status: 200}))
	if len(subs.Data) != 3 || subs.Data[0].ID != subGone.ID || subs.Data[2].ID != subAll.ID {
		t.Errorf("subscriptions: want 3, newest first; got %+v", subs.Data)
	}
	subsPage := oasAs[struct {
		Data       []json.RawMessage
		NextCursor *string
	}](t, withKey(oasCall{method: "GET", path: hooks + "?limit=2", status: 200}))
	if len(subsPage.Data) != 2 || subsPage.NextCursor == nil {
		t.Fatalf("subscriptions page 1: %+v", subsPage)
	}
	subsCursor := *subsPage.NextCursor
	withKey(oasCall{method: "GET", path: hooks + "?limit=2&cursor=" + url.QueryEscape(subsCursor), status: 200})
	for _, q := range []string{"limit=0", "limit=many"} {
		withKey(oasCall{method: "GET", path: hooks + "?" + q, status: 422, code: "validation_error", invalid: true})
	}
	withKey(oasCall{method: "GET", path: hooks + "?event=conversion.created", status: 422, code: "validation_error"})
	call(oasCall{method: "GET", path: hooks + "?limit=2&cursor=" + url.QueryEscape(subsCursor), key: busyKey, status: 422, code: "validation_error"})
	noSub := ids.New("sub_", now)
	got := oasAs[tally.Subscription](t, withKey(oasCall{method: "GET", path: hooks + "/" + subAll.ID, status: 200}))
	if !reflect.DeepEqual(got, subAll) {
		t.Errorf("GET subscription: %+v, want %+v", got, subAll)
	}
	withKey(oasCall{method: "GET", path: hooks + "/" + noSub, status: 404, code: "not_found"})
	withKey(oasCall{method: "GET", path: hooks + "/sub_nope", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "GET", path: hooks + "/" + subAll.ID, key: otherKey, status: 404, code: "not_found"})
	call(oasCall{method: "DELETE", path: hooks + "/" + subAll.ID, key: otherKey, status: 404, code: "not_found"})
	call(oasCall{method: "POST", path: hooks + "/" + subAll.ID + "/test", key: otherKey, status: 404, code: "not_found"})
	withKey(oasCall{method: "DELETE", path: hooks + "/" + noSub, status: 404, code: "not_found"})
	withKey(oasCall{method: "POST", path: hooks + "/" + noSub + "/test", status: 404, code: "not_found"})

	// --- The webhook event catalog: no key, the catalog's own files, and
	// the same schemas and examples as the document's webhooks section.
	catalogAnswer := call(oasCall{method: "GET", path: "/api/public/webhook-events", status: 200})
	call(oasCall{method: "GET", path: "/api/public/webhook-events?limit=5", status: 422, code: "validation_error"})
	wantCatalog, err := json.Marshal(map[string]any{"data": catalog.Events(), "nextCursor": nil})
	if err != nil {
		t.Fatal(err)
	}
	if err := oasSameJSON(catalogAnswer.body, wantCatalog); err != nil {
		t.Errorf("GET /api/public/webhook-events is not the catalog: %v", err)
	}
	for _, e := range oasAs[struct{ Data []catalog.EventType }](t, catalogAnswer).Data {
		_, data, err := o.webhookSchemas(e.Name)
		if err != nil {
			t.Error(err)
			continue
		}
		copied, err := o.componentJSON(data)
		if err != nil {
			t.Fatal(err)
		}
		if err := oasSameJSON(copied, e.Schema); err != nil {
			t.Errorf("the schema served for %s is not components.schemas.%s: %v", e.Name, data, err)
		}
		if err := o.checkDelivery(oasSyntheticDelivery(e.Name, e.Example, secret)); err != nil {
			t.Errorf("the example served for %s does not pass the document: %v", e.Name, err)
		}
	}

	// --- The public application form.
	apply := "/api/public/brands/" + brand.ID + "/applications"
	p1 := oasAs[tally.Partner](t, call(oasCall{method: "POST", path: apply, status: 201, body: map[string]any{
		"name": "  Deal Hunters ", "email": "team@dealhunters.example", "website": "https://dealhunters.example", "message": "Coupons, 200k visitors a month.",
	}}))
	p2 := oasAs[tally.Partner](t, call(oasCall{method: "POST", path: apply, status: 201, body: map[string]any{"name": "Blog Network", "email": "hi@blognet.example"}}))
	p3 := oasAs[tally.Partner](t, call(oasCall{method: "POST", path: apply, status: 201, body: map[string]any{"name": "Spammy", "email": "x@spam.example"}}))
	if p1.Name != "Deal Hunters" || p1.Status != tally.PartnerApplied || p2.Website != "" {
		t.Errorf("applications: got %+v and %+v", p1, p2)
	}
	call(oasCall{method: "POST", path: apply, status: 409, code: "conflict", body: map[string]any{"name": "Again", "email": "TEAM@dealhunters.example"}})
	call(oasCall{method: "POST", path: "/api/public/brands/" + noBrand + "/applications", status: 404, code: "not_found", body: map[string]any{"name": "A", "email": "a@b.example"}})
	call(oasCall{method: "POST", path: "/api/public/brands/brd_nope/applications", status: 404, code: "not_found", invalid: true, body: map[string]any{"name": "A", "email": "a@b.example"}})
	for _, body := range []any{
		map[string]any{"name": "A", "email": "not-an-address"},
		map[string]any{"name": "A", "email": "Pat <pat@b.example>"},
		map[string]any{"name": "A", "email": "a@b.example", "website": "ftp://files.example"},
		map[string]any{"name": "   ", "email": "a@b.example"},
		map[string]any{"email": "a@b.example"},
		map[string]any{"name": "A", "email": "a@b.example", "phone": "555"},
		map[string]any{"name": "A", "email": "a@b.example", "message": strings.Repeat("m", 2001)},
		map[string]any{"name": 7, "email": "a@b.example"},
		oasRaw(`[]`),
	} {
		call(oasCall{method: "POST", path: apply, status: 422, code: "validation_error", invalid: true, body: body})
	}
	call(oasCall{method: "POST", path: apply, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"name":`)})
	call(oasCall{method: "POST", path: apply, status: 400, code: "invalid_json", invalid: true, body: oasRaw(``)})
	call(oasCall{method: "POST", path: apply, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`name=A`), contentType: "application/x-www-form-urlencoded"})
	call(oasCall{method: "POST", path: apply, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})

	// --- Partners.
	all := oasAs[struct{ Data []tally.Partner }](t, withKey(oasCall{method: "GET", path: "/api/v1/partners", status: 200}))
	if len(all.Data) != 3 || all.Data[0].ID != p3.ID {
		t.Errorf("partners: want 3, newest first; got %+v", all.Data)
	}
	type page struct {
		Data       []json.RawMessage
		NextCursor *string
	}
	first := oasAs[page](t, withKey(oasCall{method: "GET", path: "/api/v1/partners?status=applied&limit=2", status: 200}))
	if len(first.Data) != 2 || first.NextCursor == nil {
		t.Fatalf("partners page 1: %+v", first)
	}
	partnersCursor := *first.NextCursor
	second := oasAs[page](t, withKey(oasCall{method: "GET", path: "/api/v1/partners?status=applied&limit=2&cursor=" + url.QueryEscape(partnersCursor), status: 200}))
	if len(second.Data) != 1 || second.NextCursor != nil {
		t.Errorf("partners page 2: %+v", second)
	}
	withKey(oasCall{method: "GET", path: "/api/v1/partners/" + p1.ID, status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/partners/" + noPartner, status: 404, code: "not_found"})
	withKey(oasCall{method: "GET", path: "/api/v1/partners/prt_nope", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "GET", path: "/api/v1/partners/" + p1.ID, key: otherKey, status: 404, code: "not_found"})
	for _, q := range []string{"status=bogus", "limit=0", "limit=101", "limit=ten"} {
		withKey(oasCall{method: "GET", path: "/api/v1/partners?" + q, status: 422, code: "validation_error", invalid: true})
	}
	// Faults the document cannot express: unknown parameters, foreign cursors.
	withKey(oasCall{method: "GET", path: "/api/v1/partners?sort=name", status: 422, code: "validation_error"})
	withKey(oasCall{method: "GET", path: "/api/v1/partners?cursor=bm90LWEtY3Vyc29y", status: 422, code: "validation_error"})
	withKey(oasCall{method: "GET", path: "/api/v1/partners?status=active&limit=2&cursor=" + url.QueryEscape(partnersCursor), status: 422, code: "validation_error"})

	p1 = oasAs[tally.Partner](t, withKey(oasCall{method: "POST", path: "/api/v1/partners/" + p1.ID + "/approve", status: 200}))
	p2 = oasAs[tally.Partner](t, withKey(oasCall{method: "POST", path: "/api/v1/partners/" + p2.ID + "/reject", status: 200}))
	p3 = oasAs[tally.Partner](t, withKey(oasCall{method: "POST", path: "/api/v1/partners/" + p3.ID + "/ban", status: 200}))
	if p1.Status != tally.PartnerActive || p2.Status != tally.PartnerRejected || p3.Status != tally.PartnerBanned {
		t.Errorf("partner transitions: %s %s %s", p1.Status, p2.Status, p3.Status)
	}
	for _, action := range []struct{ id, verb string }{{p1.ID, "approve"}, {p1.ID, "reject"}, {p2.ID, "reject"}, {p3.ID, "ban"}} {
		withKey(oasCall{method: "POST", path: "/api/v1/partners/" + action.id + "/" + action.verb, status: 409, code: "invalid_transition"})
	}
	for _, verb := range []string{"approve", "reject", "ban"} {
		withKey(oasCall{method: "POST", path: "/api/v1/partners/" + noPartner + "/" + verb, status: 404, code: "not_found"})
		call(oasCall{method: "POST", path: "/api/v1/partners/" + p1.ID + "/" + verb, key: otherKey, status: 404, code: "not_found"})
	}

	// --- Offers.
	newOffer := func(extra map[string]any) map[string]any {
		body := map[string]any{"name": "Running shoes", "destinationUrl": "https://shop.example/run?click={click_id}", "revenueCents": 5000, "payoutCents": 1500, "currency": "USD"}
		for k, v := range extra {
			if v == nil {
				delete(body, k)
			} else {
				body[k] = v
			}
		}
		return body
	}
	createOffer := func(extra map[string]any) tally.Offer {
		t.Helper()
		return oasAs[tally.Offer](t, withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 201, body: newOffer(extra)}))
	}
	autoOffer := createOffer(nil)
	manualOffer := createOffer(map[string]any{"currency": "EUR", "approval": "manual", "holdHours": 72, "caps": map[string]any{"daily": 2, "weekly": nil}})
	onceOffer := createOffer(map[string]any{"status": "active", "approval": "auto", "holdHours": 0, "caps": map[string]any{"global": 1}})
	pausedOffer := createOffer(map[string]any{"status": "paused", "name": "Winter sale", "revenueCents": 0, "payoutCents": 0})
	if autoOffer.Status != tally.OfferActive || autoOffer.Approval != tally.ApprovalAuto || manualOffer.Caps.Daily == nil || *manualOffer.Caps.Daily != 2 {
		t.Errorf("offers: got %+v and %+v", autoOffer, manualOffer)
	}
	for _, extra := range []map[string]any{
		{"name": nil},
		{"name": " "},
		{"name": strings.Repeat("n", 201)},
		{"destinationUrl": "shop.example/run"},
		{"revenueCents": nil},
		{"revenueCents": -1},
		{"revenueCents": 1_000_000_000_001},
		{"payoutCents": "300"},
		{"payoutCents": 2.5},
		{"currency": "usd"},
		{"currency": "XXX"},
		{"status": "archived"},
		{"approval": "sometimes"},
		{"holdHours": 24},
		{"holdHours": 24, "approval": "auto"},
		{"holdHours": 9000, "approval": "manual"},
		{"holdHours": -1},
		{"caps": map[string]any{"daily": 0}},
		{"caps": map[string]any{"hourly": 5}},
		{"caps": []int{1}},
		{"color": "red"},
	} {
		withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 422, code: "validation_error", invalid: true, body: newOffer(extra)})
	}
	withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 422, code: "validation_error", invalid: true, body: oasRaw(`"an offer"`)})
	withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"name": "x",}`)})
	withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 413, code: "payload_too_large", invalid: true, body: oasBig()})

	offers := oasAs[struct{ Data []tally.Offer }](t, withKey(oasCall{method: "GET", path: "/api/v1/offers", status: 200}))
	if len(offers.Data) != 4 || offers.Data[0].ID != pausedOffer.ID {
		t.Errorf("offers: want 4, newest first; got %d", len(offers.Data))
	}
	offersPage := oasAs[page](t, withKey(oasCall{method: "GET", path: "/api/v1/offers?limit=3", status: 200}))
	if offersPage.NextCursor == nil {
		t.Fatal("offers page 1 has no cursor")
	}
	withKey(oasCall{method: "GET", path: "/api/v1/offers?limit=3&cursor=" + url.QueryEscape(*offersPage.NextCursor), status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/offers?cursor=" + url.QueryEscape(partnersCursor), status: 422, code: "validation_error"})
	withKey(oasCall{method: "GET", path: "/api/v1/offers?limit=-5", status: 422, code: "validation_error", invalid: true})
	withKey(oasCall{method: "GET", path: "/api/v1/offers/" + autoOffer.ID, status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/offers/" + noOffer, status: 404, code: "not_found"})
	call(oasCall{method: "GET", path: "/api/v1/offers/" + autoOffer.ID, key: otherKey, status: 404, code: "not_found"})

	// --- Tracking links and clicks.
	clicked := oasClicks(t, call, withKey, oasClickSetup{brand: brand.ID, offer: autoOffer, paused: pausedOffer,
		active: p1.ID, rejected: p2.ID, banned: p3.ID, otherKey: otherKey})
	blockedID := oasFraud(t, call, withKey, otherKey)
	postbackToken, postbackClick := oasAttribution(t, call, svc)

	// --- Conversions.
	postConversion := func(status int, code string, body map[string]any) oasAnswer {
		t.Helper()
		return withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: status, code: code, body: body})
	}
	c1 := oasAs[tally.Conversion](t, postConversion(201, "", map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "externalTxnId": "order-1", "sub1": "newsletter"}))
	replay := oasAs[tally.Conversion](t, postConversion(200, "", map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "externalTxnId": "order-1", "revenueCents": 1}))
	if c1.Status != tally.ConversionApproved || replay.ID != c1.ID || replay.RevenueCents != 5000 {
		t.Errorf("conversion %+v, replay %+v", c1, replay)
	}
	c2 := oasAs[tally.Conversion](t, postConversion(201, "", map[string]any{"offerId": manualOffer.ID, "partnerId": p1.ID, "revenueCents": 1000, "payoutCents": 100}))
	c3 := oasAs[tally.Conversion](t, postConversion(201, "", map[string]any{"offerId": manualOffer.ID, "partnerId": p1.ID,
		"sub1": "a", "sub2": "b", "sub3": "c", "sub4": "d", "sub5": "e", "externalTxnId": "order-2"}))
	if c2.Status != tally.ConversionPending || c2.ApproveAt == nil || c2.Currency != "EUR" {
		t.Errorf("pending conversion: %+v", c2)
	}
	postConversion(422, "cap_reached", map[string]any{"offerId": manualOffer.ID, "partnerId": p1.ID})
	postConversion(201, "", map[string]any{"offerId": onceOffer.ID, "partnerId": p1.ID, "currency": "GBP", "revenueCents": 0, "payoutCents": 0})
	postConversion(422, "cap_reached", map[string]any{"offerId": onceOffer.ID, "partnerId": p1.ID})
	for _, body := range []map[string]any{
		{"offerId": pausedOffer.ID, "partnerId": p1.ID},   // offer not active
		{"offerId": autoOffer.ID, "partnerId": p2.ID},     // partner rejected
		{"offerId": autoOffer.ID, "partnerId": p3.ID},     // partner banned
		{"offerId": noOffer, "partnerId": p1.ID},          // no such offer
		{"offerId": autoOffer.ID, "partnerId": noPartner}, // no such partner
		{"offerId": autoOffer.ID, "clickId": ids.New("clk_", now)},
	} {
		postConversion(422, "validation_error", body)
	}
	for _, body := range []any{
		map[string]any{"offerId": autoOffer.ID},
		map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "clickId": "clk_x"},
		map[string]any{"partnerId": p1.ID},
		map[string]any{"offerId": "off_123", "partnerId": p1.ID},
		map[string]any{"offerId": autoOffer.ID, "partnerId": "partner-1"},
		map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "externalTxnId": "order\x01"},
		map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "sub3": strings.Repeat("s", 256)},
		map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "currency": "EURO"},
		map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "payoutCents": -10},
		map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "status": "approved"},
		oasRaw(`42`),
	} {
		withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 422, code: "validation_error", invalid: true, body: body})
	}
	withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"offerId": "x"} {}`)})
	withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "none"})
	withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 413, code: "payload_too_large", invalid: true, body: oasBig()})

	c2 = oasAs[tally.Conversion](t, withKey(oasCall{method: "POST", path: "/api/v1/conversions/" + c2.ID + "/approve", status: 200}))
	c3 = oasAs[tally.Conversion](t, withKey(oasCall{method: "POST", path: "/api/v1/conversions/" + c3.ID + "/reject", status: 200}))
	if c2.Status != tally.ConversionApproved || c2.ApproveAt != nil || c3.Status != tally.ConversionRejected {
		t.Errorf("decided conversions: %+v %+v", c2, c3)
	}
	for _, id := range []string{c1.ID, c2.ID, c3.ID} {
		for _, verb := range []string{"approve", "reject"} {
			withKey(oasCall{method: "POST", path: "/api/v1/conversions/" + id + "/" + verb, status: 409, code: "invalid_transition"})
		}
	}
	for _, verb := range []string{"approve", "reject"} {
		withKey(oasCall{method: "POST", path: "/api/v1/conversions/" + noConversion + "/" + verb, status: 404, code: "not_found"})
		call(oasCall{method: "POST", path: "/api/v1/conversions/" + c1.ID + "/" + verb, key: otherKey, status: 404, code: "not_found"})
	}
	withKey(oasCall{method: "GET", path: "/api/v1/conversions/" + c1.ID, status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/conversions/" + noConversion, status: 404, code: "not_found"})
	withKey(oasCall{method: "GET", path: "/api/v1/conversions/cnv_", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "GET", path: "/api/v1/conversions/" + c1.ID, key: otherKey, status: 404, code: "not_found"})

	conversions := oasAs[struct{ Data []tally.Conversion }](t, withKey(oasCall{method: "GET", path: "/api/v1/conversions", status: 200}))
	if len(conversions.Data) != 4 {
		t.Errorf("conversions: want 4, got %d", len(conversions.Data))
	}
	for _, q := range []string{
		"status=approved",
		"offerId=" + manualOffer.ID,
		"partnerId=" + p1.ID + "&status=rejected",
		"externalTxnId=order-1",
		"from=" + today + "&to=" + today,
		"from=" + url.QueryEscape(now.Add(-time.Hour).Format(time.RFC3339)) + "&to=" + url.QueryEscape(now.Add(time.Hour).Format(time.RFC3339Nano)),
	} {
		withKey(oasCall{method: "GET", path: "/api/v1/conversions?" + q, status: 200})
	}
	convPage := oasAs[page](t, withKey(oasCall{method: "GET", path: "/api/v1/conversions?limit=3", status: 200}))
	if len(convPage.Data) != 3 || convPage.NextCursor == nil {
		t.Fatalf("conversions page 1: %+v", convPage)
	}
	last := oasAs[page](t, withKey(oasCall{method: "GET", path: "/api/v1/conversions?limit=3&cursor=" + url.QueryEscape(*convPage.NextCursor), status: 200}))
	if len(last.Data) != 1 || last.NextCursor != nil {
		t.Errorf("conversions page 2: %+v", last)
	}
	for _, q := range []string{"status=held", "from=yesterday", "to=2026-13-01", "limit=500"} {
		withKey(oasCall{method: "GET", path: "/api/v1/conversions?" + q, status: 422, code: "validation_error", invalid: true})
	}
	withKey(oasCall{method: "GET", path: "/api/v1/conversions?from=2026-02-30", status: 422, code: "validation_error"})
	// The document only admits offer ids, and so does the server.
	withKey(oasCall{method: "GET", path: "/api/v1/conversions?offerId=123", status: 422, code: "validation_error", invalid: true})
	withKey(oasCall{method: "GET", path: "/api/v1/conversions?page=2", status: 422, code: "validation_error"})

	// --- Partner money.
	portalCalls := oasPortal(t, call, withKey, srv.URL, p1.ID, p3.ID, otherKey)
	moneyCalls := oasMoney(t, call, withKey, oasMoneySetup{offer: autoOffer, active: p1.ID, banned: p3.ID, approved: c1.ID, approvedEUR: c2.ID, otherKey: otherKey, st: st})

	// --- Reports.
	report := oasAs[reports.Report](t, withKey(oasCall{method: "GET", path: "/api/v1/reports", status: 200}))
	if len(report.Data) != 3 { // one row per currency: USD, EUR, GBP
		t.Errorf("report: %+v", report)
	}
	for _, q := range []string{
		"groupBy=day,offer,partner",
		"groupBy=week,month&from=" + now.AddDate(0, 0, -7).Format(time.DateOnly) + "&to=" + today,
		"groupBy=offer&offerId=" + autoOffer.ID + "&partnerId=" + p1.ID,
		"from=" + now.AddDate(0, 0, -365).Format(time.DateOnly) + "&to=" + today,
		"groupBy=day&timezone=America/New_York",
		"groupBy=month,offer&timezone=Asia/Kathmandu&format=json",
	} {
		withKey(oasCall{method: "GET", path: "/api/v1/reports?" + q, status: 200})
	}
	csvAnswer := withKey(oasCall{method: "GET", path: "/api/v1/reports?groupBy=day,offer&timezone=Europe/Paris&format=csv", status: 200})
	if !strings.HasPrefix(string(csvAnswer.body), "day,offerId,currency,conversions,") || csvAnswer.header.Get("Content-Type") != "text/csv; charset=utf-8" {
		t.Errorf("CSV report: %s %s", csvAnswer.header.Get("Content-Type"), csvAnswer.body)
	}
	withKey(oasCall{method: "GET", path: "/api/v1/reports?format=xml", status: 422, code: "validation_error", invalid: true})
	withKey(oasCall{method: "GET", path: "/api/v1/reports?timezone=Mars/Base", status: 422, code: "validation_error"})
	for _, q := range []string{"groupBy=year", "groupBy=day,,offer", "from=last-week", "to=" + now.Format(time.RFC3339), "limit=10"} {
		withKey(oasCall{method: "GET", path: "/api/v1/reports?" + q, status: 422, code: "validation_error", invalid: q != "limit=10"})
	}
	withKey(oasCall{method: "GET", path: "/api/v1/reports?from=" + today + "&to=" + now.AddDate(0, 0, -1).Format(time.DateOnly), status: 422, code: "validation_error"})
	withKey(oasCall{method: "GET", path: "/api/v1/reports?from=2020-01-01&to=" + today, status: 422, code: "validation_error"})

	// --- Webhook deliveries. A test event to each of two subscriptions; the
	// second subscription is deleted while its delivery is pending.
	testEvt := oasAs[tally.Event](t, withKey(oasCall{method: "POST", path: hooks + "/" + subAll.ID + "/test", status: 202}))
	goneEvt := oasAs[tally.Event](t, withKey(oasCall{method: "POST", path: hooks + "/" + subGone.ID + "/test", status: 202}))
	if testEvt.Event != tally.EventWebhookTest || testEvt.BrandID != brand.ID || !strings.Contains(string(testEvt.Data), subAll.ID) {
		t.Errorf("test event: %+v", testEvt)
	}
	goneRefs, err := svc.Webhooks.FanOut(ctx, goneEvt.ID)
	if err != nil || len(goneRefs) != 1 {
		t.Fatalf("fan out the test event of %s: %v, %v", subGone.ID, goneRefs, err)
	}
	deleted := oasAs[tally.Subscription](t, withKey(oasCall{method: "DELETE", path: hooks + "/" + subGone.ID, status: 200}))
	if deleted.ID != subGone.ID || !deleted.HasSecret {
		t.Errorf("DELETE answered %+v", deleted)
	}
	withKey(oasCall{method: "GET", path: hooks + "/" + subGone.ID, status: 404, code: "not_found"})
	withKey(oasCall{method: "DELETE", path: hooks + "/" + subGone.ID, status: 404, code: "not_found"})
	withKey(oasCall{method: "POST", path: hooks + "/" + subGone.ID + "/test", status: 404, code: "not_found"})

	// Every event of the session goes out now, and every request the
	// receivers got must match the webhooks section.
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true, Timeout: 5 * time.Second})
	t.Cleanup(sender.CloseIdleConnections)
	oasDeliverAll(t, svc, sender, brand.ID)
	if status := oasAttemptAll(t, svc, sender, goneRefs[0]); status != tally.DeliveryFailed {
		t.Errorf("the delivery to a deleted subscription is %s, want failed", status)
	}
	webhooksSeen := map[string]bool{}
	signed, unsigned := 0, 0
	checkReceived := func(r *oasReceiver) []oasDelivery {
		t.Helper()
		got := r.take()
		for _, d := range got {
			name := d.header.Get(webhook.EventHeader)
			if err := o.checkDelivery(d); err != nil {
				t.Errorf("a delivery the receiver got does not match the document: %v\nheaders: %v\nbody: %s", err, d.header, d.body)
				continue
			}
			webhooksSeen[name] = true
			if err := schemacheck.ValidateEnvelope(d.body); err != nil {
				t.Errorf("%s delivery: %v", name, err)
			}
			if d.header.Get(webhook.SignatureHeader) == "" {
				unsigned++
			} else if err := webhook.Verify(secret, d.header.Get(webhook.SignatureHeader), d.body, 0); err != nil {
				t.Errorf("%s delivery: signature: %v", name, err)
			} else {
				signed++
			}
		}
		return got
	}
	okGot, failGot := checkReceived(accepting), checkReceived(refusing)
	if len(okGot) != 20 || len(failGot) != webhooks.MaxAttempts || signed != len(okGot) || unsigned != len(failGot) {
		t.Fatalf("receivers got %d and %d requests (%d signed, %d not); want 20 signed and %d unsigned", len(okGot), len(failGot), signed, unsigned, webhooks.MaxAttempts)
	}
	for _, d := range okGot {
		if d.path != "/tally?source=oas" {
			t.Errorf("a delivery went to %s", d.path)
		}
	}
	for _, d := range failGot[1:] {
		if d.header.Get(webhook.WebhookIDHeader) != failGot[0].header.Get(webhook.WebhookIDHeader) || !bytes.Equal(d.body, failGot[0].body) {
			t.Errorf("a retry differs from attempt 1: %v %s", d.header, d.body)
		}
	}
	if missing := o.unseenWebhooks(webhooksSeen); len(missing) > 0 {
		t.Errorf("webhooks of the document the session never delivered: %v", missing)
	}

	// The delivery log.
	deliveries := "/api/v1/deliveries"
	type deliveryPage struct {
		Data       []tally.Delivery
		NextCursor *string
	}
	deliveryLog := oasAs[deliveryPage](t, withKey(oasCall{method: "GET", path: deliveries + "?limit=100", status: 200}))
	statuses := map[string]int{}
	for _, d := range deliveryLog.Data {
		statuses[d.Status]++
	}
	if len(deliveryLog.Data) != 22 || statuses[tally.DeliverySucceeded] != 20 || statuses[tally.DeliveryFailed] != 2 || deliveryLog.NextCursor != nil {
		t.Errorf("delivery log: %d deliveries, %v", len(deliveryLog.Data), statuses)
	}
	failed := oasAs[deliveryPage](t, withKey(oasCall{method: "GET", path: deliveries + "?status=failed&subscriptionId=" + subFail.ID, status: 200})).Data
	if len(failed) != 1 || len(failed[0].Attempts) != webhooks.MaxAttempts || failed[0].Event != tally.EventPartnerBanned || failed[0].NextAttemptAt != nil {
		t.Fatalf("failed deliveries to %s: %+v", subFail.ID, failed)
	}
	failedID := failed[0].ID
	if failGot[0].header.Get(webhook.WebhookIDHeader) != failedID {
		t.Errorf("X-Tally-Webhook-Id %q, want the delivery's id %s", failGot[0].header.Get(webhook.WebhookIDHeader), failedID)
	}
	for _, a := range failed[0].Attempts {
		if a.StatusCode != http.StatusInternalServerError || a.Response != "receiver down" || a.Error != "" {
			t.Errorf("attempt %+v", a)
		}
	}
	tested := oasAs[deliveryPage](t, withKey(oasCall{method: "GET", path: deliveries + "?eventId=" + testEvt.ID, status: 200})).Data
	if len(tested) != 1 || tested[0].Status != tally.DeliverySucceeded || tested[0].SubscriptionID != subAll.ID || tested[0].Attempts[0].Response != `{"received":true}` {
		t.Fatalf("the test event's deliveries: %+v", tested)
	}
	goneID := goneRefs[0].DeliveryID
	goneDelivery := oasAs[tally.Delivery](t, withKey(oasCall{method: "GET", path: deliveries + "/" + goneID, status: 200}))
	if goneDelivery.Status != tally.DeliveryFailed || len(goneDelivery.Attempts) != 0 {
		t.Errorf("the delivery to the deleted subscription: %+v", goneDelivery)
	}
	for _, q := range []string{
		"type=webhook",
		"type=postback",
		"status=succeeded&type=webhook",
		"status=pending",
		"subscriptionId=" + subAll.ID + "&status=succeeded",
		"subscriptionId=" + noSub,
		"eventId=" + goneEvt.ID,
		"from=" + today + "&to=" + today,
		"from=" + url.QueryEscape(now.Add(-time.Hour).Format(time.RFC3339)) + "&to=" + url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339Nano)),
	} {
		withKey(oasCall{method: "GET", path: deliveries + "?" + q, status: 200})
	}
	delPage := oasAs[deliveryPage](t, withKey(oasCall{method: "GET", path: deliveries + "?limit=10", status: 200}))
	if len(delPage.Data) == 0 || delPage.NextCursor == nil {
		t.Fatalf("deliveries page 1: %d, cursor %v", len(delPage.Data), delPage.NextCursor)
	}
	withKey(oasCall{method: "GET", path: deliveries + "?limit=10&cursor=" + url.QueryEscape(*delPage.NextCursor), status: 200})
	for _, q := range []string{"type=sms", "status=done", "subscriptionId=sub_nope", "eventId=" + testEvt.ID[:10], "from=yesterday", "to=2026-13-01", "limit=0", "limit=101"} {
		withKey(oasCall{method: "GET", path: deliveries + "?" + q, status: 422, code: "validation_error", invalid: true})
	}
	if banned := oasAs[deliveryPage](t, withKey(oasCall{method: "GET", path: deliveries + "?event=partner.banned", status: 200})).Data; len(banned) != 2 {
		t.Errorf("deliveries of partner.banned: %d, want 2", len(banned))
	}
	for _, q := range []string{"event=order.paid", "partnerId=" + subAll.ID, "partnerId=" + p1.ID + "&subscriptionId=" + subAll.ID} {
		withKey(oasCall{method: "GET", path: deliveries + "?" + q, status: 422, code: "validation_error", invalid: !strings.Contains(q, "&")})
	}
	withKey(oasCall{method: "GET", path: deliveries + "?cursor=" + url.QueryEscape(partnersCursor), status: 422, code: "validation_error"})
	withKey(oasCall{method: "GET", path: deliveries + "?limit=10&status=failed&cursor=" + url.QueryEscape(*delPage.NextCursor), status: 422, code: "validation_error"})

	noDelivery := ids.New("wh_", now)
	withKey(oasCall{method: "GET", path: deliveries + "/" + failedID, status: 200})
	withKey(oasCall{method: "GET", path: deliveries + "/" + noDelivery, status: 404, code: "not_found"})
	withKey(oasCall{method: "GET", path: deliveries + "/wh_nope", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "GET", path: deliveries + "/" + failedID, key: otherKey, status: 404, code: "not_found"})

	// Retries: only failed deliveries, and each starts the schedule over.
	retried := oasAs[tally.Delivery](t, withKey(oasCall{method: "POST", path: deliveries + "/" + failedID + "/retry", status: 200}))
	if retried.Status != tally.DeliveryPending || retried.NextAttemptAt == nil || len(retried.Attempts) != webhooks.MaxAttempts {
		t.Errorf("retried delivery: %+v", retried)
	}
	withKey(oasCall{method: "POST", path: deliveries + "/" + failedID + "/retry", status: 409, code: "invalid_transition"})
	withKey(oasCall{method: "POST", path: deliveries + "/" + tested[0].ID + "/retry", status: 409, code: "invalid_transition"})
	withKey(oasCall{method: "POST", path: deliveries + "/" + noDelivery + "/retry", status: 404, code: "not_found"})
	withKey(oasCall{method: "POST", path: deliveries + "/wh_/retry", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "POST", path: deliveries + "/" + failedID + "/retry", key: otherKey, status: 404, code: "not_found"})
	withKey(oasCall{method: "GET", path: deliveries + "?status=pending", status: 200})
	// A delivery whose subscription was deleted has nowhere to go.
	withKey(oasCall{method: "POST", path: deliveries + "/" + goneID + "/retry", status: 409, code: "invalid_transition"})
	if status := oasAttemptAll(t, svc, sender, endpoints.DeliveryRef{BrandID: brand.ID, DeliveryID: failedID}); status != tally.DeliveryFailed {
		t.Errorf("retried delivery %s ended %s, want failed", failedID, status)
	}
	if failGot = checkReceived(refusing); len(failGot) != webhooks.MaxAttempts || len(accepting.take()) != 0 {
		t.Errorf("the retry sent %d requests, want %d, and none to the deleted subscription", len(failGot), webhooks.MaxAttempts)
	}
	againAnswer := withKey(oasCall{method: "GET", path: deliveries + "/" + failedID, status: 200})
	again := oasAs[tally.Delivery](t, againAnswer)
	goneDelivery = oasAs[tally.Delivery](t, withKey(oasCall{method: "GET", path: deliveries + "/" + goneID, status: 200}))
	if again.Status != tally.DeliveryFailed || len(again.Attempts) != 2*webhooks.MaxAttempts || goneDelivery.Status != tally.DeliveryFailed || len(goneDelivery.Attempts) != 0 {
		t.Errorf("after the retries: %s with %d attempts, %s with %d", again.Status, len(again.Attempts), goneDelivery.Status, len(goneDelivery.Attempts))
	}

	// --- Partner postbacks, endpoint health, and changing a subscription.
	// A second instance over the same store disables an endpoint at its
	// first failed attempt, for the 409s of recover.
	strict := servicetest.New(st, service.WithLoopbackReceivers(), service.WithEndpointHealth(1, 0))
	postback := "/api/v1/partners/" + p1.ID + "/postback"
	noPostback := "/api/v1/partners/" + noPartner + "/postback"
	pbReceiver := newOASReceiver(t, http.StatusNoContent, "")
	withKey(oasCall{method: "GET", path: postback, status: 404, code: "not_found"})
	for _, body := range []any{
		map[string]any{"events": []string{"conversion.created"}},
		map[string]any{"url": "ftp://partner.example/pb"},
		map[string]any{"url": "https://{sub1}.partner.example/pb"},
		map[string]any{"url": "https://partner.example/pb", "events": []string{"partner.banned"}},
		map[string]any{"url": "https://partner.example/pb", "events": []string{}},
		map[string]any{"url": "https://partner.example/pb", "secret": "whsec_0123456789abcdef"},
	} {
		withKey(oasCall{method: "PUT", path: postback, status: 422, code: "validation_error", invalid: true, body: body})
	}
	for _, tmpl := range []string{"/pb?rev={revenue}", "/pb?c={click_id", "/pb?c=click_id}"} {
		withKey(oasCall{method: "PUT", path: postback, status: 422, code: "validation_error", body: map[string]any{"url": "https://partner.example" + tmpl}})
	}
	withKey(oasCall{method: "PUT", path: postback, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"url":`)})
	withKey(oasCall{method: "PUT", path: postback, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "PUT", path: postback, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	pbBody := map[string]any{"url": refusing.srv.URL + "/pb?c={conversion_id}&p={payout}&s={status}", "events": []string{"conversion.created", "conversion.approved"}}
	withKey(oasCall{method: "PUT", path: noPostback, status: 404, code: "not_found", body: pbBody})
	call(oasCall{method: "PUT", path: postback, key: otherKey, status: 404, code: "not_found", body: pbBody})
	pb := oasAs[tally.Postback](t, withKey(oasCall{method: "PUT", path: postback, status: 200, body: pbBody}))
	if pb.PartnerID != p1.ID || pb.Status != tally.EndpointEnabled || len(pb.Events) != 2 {
		t.Errorf("PUT postback answered %+v", pb)
	}
	withKey(oasCall{method: "GET", path: postback, status: 200})
	call(oasCall{method: "GET", path: postback, key: otherKey, status: 404, code: "not_found"})
	// A conversion fires it; its receiver refuses, and the strict instance
	// disables the postback at that first failure.
	pbConversion := oasAs[tally.Conversion](t, postConversion(201, "", map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID, "externalTxnId": "order-postback"}))
	fanOutOne := func(svc *service.Service, eventID string) {
		t.Helper()
		refs, err := svc.Webhooks.FanOut(ctx, eventID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs {
			oasAttemptAll(t, svc, sender, ref)
		}
	}
	newest, _, err := svc.Events.Events(ctx, brand.ID, records.ListParams{Limit: 1})
	if err != nil || len(newest) != 1 || !strings.Contains(string(newest[0].Data), pbConversion.ID) {
		t.Fatalf("the newest event: %v, %v", newest, err)
	}
	fanOutOne(strict, newest[0].ID)
	pbLog := oasAs[deliveryPage](t, withKey(oasCall{method: "GET", path: deliveries + "?type=postback&partnerId=" + p1.ID, status: 200})).Data
	if len(pbLog) != 1 || pbLog[0].Status != tally.DeliveryFailed || pbLog[0].PartnerID != p1.ID ||
		pbLog[0].URL != refusing.srv.URL+"/pb?c="+pbConversion.ID+"&p=15.00&s=approved" {
		t.Fatalf("the postback in the log: %+v", pbLog)
	}
	disabled := oasAs[tally.Postback](t, withKey(oasCall{method: "GET", path: postback, status: 200}))
	if disabled.Status != tally.EndpointDisabled || disabled.DisabledReason != tally.DisabledConsecutiveFailures {
		t.Errorf("the postback after a failure on the strict instance: %+v", disabled.EndpointHealth)
	}
	since := map[string]any{"since": now.Add(-time.Hour).Format(time.RFC3339)}
	withKey(oasCall{method: "POST", path: postback + "/recover", status: 409, code: "invalid_transition", body: since})
	withKey(oasCall{method: "POST", path: postback + "/enable", status: 200})
	withKey(oasCall{method: "POST", path: noPostback + "/enable", status: 404, code: "not_found"})
	withKey(oasCall{method: "PUT", path: postback, status: 200, body: map[string]any{"url": pbReceiver.srv.URL + "/pb?c={conversion_id}"}})
	for _, body := range []any{map[string]any{}, map[string]any{"since": "yesterday"}, map[string]any{"since": now.Add(time.Hour).Format(time.RFC3339)}} {
		withKey(oasCall{method: "POST", path: postback + "/recover", status: 422, code: "validation_error", invalid: len(body.(map[string]any)) == 0 || body.(map[string]any)["since"] == "yesterday", body: body})
	}
	withKey(oasCall{method: "POST", path: postback + "/recover", status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"since"`)})
	withKey(oasCall{method: "POST", path: postback + "/recover", status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "POST", path: postback + "/recover", status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "POST", path: noPostback + "/recover", status: 404, code: "not_found", body: since})
	if rec := oasAs[endpoints.Recovery](t, withKey(oasCall{method: "POST", path: postback + "/recover", status: 200, body: since})); rec.Recovered != 1 || rec.More {
		t.Errorf("recover: %+v, want the one failed postback", rec)
	}
	// The recovered delivery was made with the URL of its time.
	if status := oasAttemptAll(t, svc, sender, endpoints.DeliveryRef{BrandID: brand.ID, DeliveryID: pbLog[0].ID}); status != tally.DeliveryFailed {
		t.Errorf("the recovered postback to the refusing receiver ended %s", status)
	}
	pbTest := oasAs[tally.Event](t, withKey(oasCall{method: "POST", path: postback + "/test", status: 202}))
	withKey(oasCall{method: "POST", path: noPostback + "/test", status: 404, code: "not_found"})
	fanOutOne(svc, pbTest.ID)
	if got := pbReceiver.take(); len(got) != 1 || got[0].method != http.MethodGet || got[0].path != "/pb?c=cnv_test" {
		t.Errorf("the test postback: %+v", got)
	}
	withKey(oasCall{method: "GET", path: deliveries + "?event=postback.test&eventId=" + pbTest.ID, status: 200})
	withKey(oasCall{method: "DELETE", path: postback, status: 200})
	withKey(oasCall{method: "DELETE", path: postback, status: 404, code: "not_found"})

	// PATCH: a new secret; the old one signs too for a while.
	withKey(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, status: 200, body: map[string]any{}})
	for _, body := range []any{map[string]any{"url": nil}, map[string]any{"events": []string{}}, map[string]any{"url": "ftp://hooks.example.com/x"},
		map[string]any{"secret": "short"}, map[string]any{"hasSecret": false}} {
		withKey(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, status: 422, code: "validation_error", invalid: true, body: body})
	}
	withKey(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"url"`)})
	withKey(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "PATCH", path: hooks + "/" + noSub, status: 404, code: "not_found", body: map[string]any{"events": []string{"cap.reached"}}})
	call(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, key: otherKey, status: 404, code: "not_found", body: map[string]any{"events": []string{"cap.reached"}}})
	rotated := oasAs[tally.Subscription](t, withKey(oasCall{method: "PATCH", path: hooks + "/" + subAll.ID, status: 200, body: map[string]any{"secret": "whsec_rotated_0123456789"}}))
	if rotated.PreviousSecretExpiresAt == nil || !rotated.HasSecret {
		t.Errorf("after a rotation: %+v", rotated)
	}
	// Enable and recover a subscription: the failing one, disabled by the
	// strict instance when its failed delivery is tried again.
	if rec := oasAs[endpoints.Recovery](t, withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/recover", status: 200, body: since})); rec.Recovered != 1 {
		t.Errorf("recover %s: %+v", subFail.ID, rec)
	}
	oasAttemptAll(t, strict, sender, endpoints.DeliveryRef{BrandID: brand.ID, DeliveryID: failedID})
	withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/recover", status: 409, code: "invalid_transition", body: since})
	enabled := oasAs[tally.Subscription](t, withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/enable", status: 200}))
	if enabled.Status != tally.EndpointEnabled || enabled.ConsecutiveFailures != 0 {
		t.Errorf("enabled: %+v", enabled.EndpointHealth)
	}
	withKey(oasCall{method: "POST", path: hooks + "/" + noSub + "/enable", status: 404, code: "not_found"})
	// Standard Webhooks subscriptions: one shows the secret Tally made,
	// once; the other its Ed25519 public key, new after a rotation.
	stdHMAC := oasAs[tally.Subscription](t, withKey(oasCall{method: "POST", path: hooks, status: 201, body: map[string]any{
		"url": accepting.srv.URL + "/std", "events": []string{"cap.reached"}, "signatureScheme": "standard-webhooks"}}))
	stdEd := oasAs[tally.Subscription](t, withKey(oasCall{method: "POST", path: hooks, status: 201, body: map[string]any{
		"url": accepting.srv.URL + "/ed", "events": []string{"cap.reached"}, "signatureScheme": "standard-webhooks", "signatureAlgorithm": "ed25519"}}))
	if rotated := oasAs[tally.Subscription](t, withKey(oasCall{method: "POST", path: hooks + "/" + stdEd.ID + "/rotate", status: 200})); stdHMAC.Secret == "" || rotated.PublicKey == stdEd.PublicKey {
		t.Errorf("standard-webhooks: secret %q shown at creation; public key %s rotated to %s", stdHMAC.Secret, stdEd.PublicKey, rotated.PublicKey)
	}
	withKey(oasCall{method: "POST", path: hooks + "/" + noSub + "/rotate", status: 404, code: "not_found"})
	withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/rotate", status: 409, code: "invalid_transition"})
	for _, id := range []string{stdHMAC.ID, stdEd.ID} {
		withKey(oasCall{method: "DELETE", path: hooks + "/" + id, status: 200})
	}
	withKey(oasCall{method: "POST", path: hooks + "/" + noSub + "/recover", status: 404, code: "not_found", body: since})
	for _, body := range []any{map[string]any{}, map[string]any{"since": now.Add(time.Hour).Format(time.RFC3339)}} {
		withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/recover", status: 422, code: "validation_error", invalid: len(body.(map[string]any)) == 0, body: body})
	}
	withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/recover", status: 400, code: "invalid_json", invalid: true, body: oasRaw(`[`)})
	withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/recover", status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "POST", path: hooks + "/" + subFail.ID + "/recover", status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})

	// --- Every operation that needs a key, without one and with a bad one.
	// --- API keys.
	keysPath := "/api/v1/keys"
	madeKey := oasAs[identity.CreatedAPIKey](t, withKey(oasCall{method: "POST", path: keysPath, status: 201, body: map[string]any{"name": "Order system"}}))
	withKey(oasCall{method: "POST", path: keysPath, status: 201, body: map[string]any{}})
	withKey(oasCall{method: "POST", path: keysPath, status: 201}) // no body: an unnamed key
	for _, body := range []any{
		map[string]any{"name": strings.Repeat("k", 101)},
		map[string]any{"name": 7},
		map[string]any{"scopes": []string{"read"}},
		oasRaw(`[]`),
	} {
		withKey(oasCall{method: "POST", path: keysPath, status: 422, code: "validation_error", invalid: true, body: body})
	}
	withKey(oasCall{method: "POST", path: keysPath, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"name": `)})
	withKey(oasCall{method: "POST", path: keysPath, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "POST", path: keysPath, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	// A brand has at most 25 active keys: fill up, the next answers 409.
	active, _, err := svc.Identity.ActiveAPIKeys(ctx, brand.ID, records.ListParams{Limit: records.MaxLimit})
	if err != nil {
		t.Fatal(err)
	}
	var fillers []string
	for range identity.MaxActiveKeys - len(active) {
		k, _, err := svc.Identity.CreateAPIKey(ctx, brand.ID)
		if err != nil {
			t.Fatal(err)
		}
		fillers = append(fillers, k.ID)
	}
	withKey(oasCall{method: "POST", path: keysPath, status: 409, code: "conflict", body: map[string]any{}})
	for _, id := range fillers {
		if _, err := svc.Identity.RevokeAPIKey(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	call(oasCall{method: "GET", path: keysPath, key: madeKey.Key, status: 200})
	withKey(oasCall{method: "GET", path: keysPath + "?limit=1", status: 200})
	withKey(oasCall{method: "GET", path: keysPath + "?limit=0", status: 422, code: "validation_error", invalid: true})
	withKey(oasCall{method: "GET", path: keysPath + "?name=x", status: 422, code: "validation_error"})
	call(oasCall{method: "DELETE", path: keysPath + "/" + madeKey.ID, key: otherKey, status: 404, code: "not_found"})
	withKey(oasCall{method: "DELETE", path: keysPath + "/" + madeKey.ID, status: 200})
	withKey(oasCall{method: "DELETE", path: keysPath + "/" + madeKey.ID, status: 404, code: "not_found"})
	call(oasCall{method: "GET", path: keysPath, key: madeKey.Key, status: 401, code: "unauthorized"})

	// --- The audit log: the changes above, newest first.
	withKey(oasCall{method: "GET", path: "/api/v1/audit-log", status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/audit-log?limit=1", status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/audit-log?limit=101", status: 422, code: "validation_error", invalid: true})

	keyed := []oasCall{
		{method: "GET", path: "/api/v1/offers"},
		{method: "POST", path: "/api/v1/offers", body: newOffer(nil)},
		{method: "GET", path: "/api/v1/offers/" + autoOffer.ID},
		{method: "GET", path: "/api/v1/partners"},
		{method: "GET", path: "/api/v1/partners/" + p1.ID},
		{method: "POST", path: "/api/v1/partners/" + p1.ID + "/approve"},
		{method: "POST", path: "/api/v1/partners/" + p1.ID + "/reject"},
		{method: "POST", path: "/api/v1/partners/" + p1.ID + "/ban"},
		{method: "POST", path: "/api/v1/conversions", body: map[string]any{"offerId": autoOffer.ID, "partnerId": p1.ID}},
		{method: "GET", path: "/api/v1/conversions"},
		{method: "GET", path: "/api/v1/conversions/" + c1.ID},
		{method: "POST", path: "/api/v1/conversions/" + c1.ID + "/approve"},
		{method: "POST", path: "/api/v1/conversions/" + c1.ID + "/reject"},
		{method: "GET", path: "/api/v1/reports"},
		{method: "POST", path: hooks, body: map[string]any{"url": accepting.srv.URL, "events": []string{"conversion.created"}}},
		{method: "GET", path: hooks},
		{method: "GET", path: hooks + "/" + subAll.ID},
		{method: "DELETE", path: hooks + "/" + subAll.ID},
		{method: "POST", path: hooks + "/" + subAll.ID + "/test"},
		{method: "PATCH", path: hooks + "/" + subAll.ID, body: map[string]any{"events": []string{"cap.reached"}}},
		{method: "POST", path: hooks + "/" + subAll.ID + "/enable"},
		{method: "POST", path: hooks + "/" + subAll.ID + "/rotate"},
		{method: "POST", path: hooks + "/" + subAll.ID + "/recover", body: since},
		{method: "PUT", path: postback, body: pbBody},
		{method: "GET", path: postback},
		{method: "DELETE", path: postback},
		{method: "POST", path: postback + "/test"},
		{method: "POST", path: postback + "/enable"},
		{method: "POST", path: postback + "/recover", body: since},
		{method: "GET", path: deliveries},
		{method: "GET", path: deliveries + "/" + failedID},
		{method: "POST", path: deliveries + "/" + failedID + "/retry"},
		{method: "GET", path: keysPath},
		{method: "POST", path: keysPath, body: map[string]any{}},
		{method: "DELETE", path: keysPath + "/" + madeKey.ID},
		{method: "GET", path: "/api/v1/audit-log"},
		{method: "GET", path: "/api/v1/clicks"},
		{method: "GET", path: "/api/v1/clicks/" + clicked},
		{method: "GET", path: "/api/v1/fraud/settings"},
		{method: "PUT", path: "/api/v1/fraud/settings", body: map[string]any{"threshold": 70, "autoBan": map[string]any{"enabled": false, "highRiskClicks": 20, "windowHours": 24}}},
		{method: "GET", path: "/api/v1/fraud/blocked-ips"},
		{method: "POST", path: "/api/v1/fraud/blocked-ips", body: map[string]any{"cidr": "192.0.2.0/24"}},
		{method: "DELETE", path: "/api/v1/fraud/blocked-ips/" + blockedID},
		{method: "PATCH", path: "/api/v1/offers/" + autoOffer.ID, body: map[string]any{"name": "Renamed"}},
		{method: "GET", path: "/api/v1/postback-token"},
		{method: "POST", path: "/api/v1/postback-token"},
		{method: "DELETE", path: "/api/v1/postback-token"},
	}
	keyed = append(keyed, moneyCalls...)
	keyed = append(keyed, portalCalls...)
	for _, c := range keyed {
		c.srv, c.status, c.code = srv, 401, "unauthorized"
		c.invalid = true
		o.do(c)
		c.key, c.invalid = badKey, false
		o.do(c)
	}

	// --- Unknown paths and methods, in the error shape.
	for _, u := range []struct {
		oasCall
		allow string
	}{
		{oasCall{method: "GET", path: "/", status: 404, code: "not_found"}, ""},
		{oasCall{method: "GET", path: "/api/v1/webhooks", key: key, status: 404, code: "not_found"}, ""},
		{oasCall{method: "GET", path: "/api/v1/offers/" + autoOffer.ID + "/clicks", key: key, status: 404, code: "not_found"}, ""},
		// The admin API is not mounted without an admin token.
		{oasCall{method: "POST", path: "/_admin/brands", body: map[string]any{"name": "x"}, status: 404, code: "not_found"}, ""},
		{oasCall{method: "DELETE", path: "/api/v1/offers/" + autoOffer.ID, key: key, status: 405, code: "method_not_allowed"}, "GET, PATCH"},
		{oasCall{method: "PUT", path: "/api/v1/offers", key: key, body: newOffer(nil), status: 405, code: "method_not_allowed"}, "GET, POST"},
		{oasCall{method: "GET", path: "/api/v1/partners/" + p1.ID + "/approve", key: key, status: 405, code: "method_not_allowed"}, "POST"},
		{oasCall{method: "GET", path: apply, status: 405, code: "method_not_allowed"}, "POST"},
		{oasCall{method: "DELETE", path: hooks, key: key, status: 405, code: "method_not_allowed"}, "POST, GET"},
		{oasCall{method: "PUT", path: hooks + "/" + subAll.ID, key: key, body: map[string]any{"events": []string{"cap.reached"}}, status: 405, code: "method_not_allowed"}, "GET, PATCH, DELETE"},
		{oasCall{method: "POST", path: postback, key: key, body: pbBody, status: 405, code: "method_not_allowed"}, "PUT, GET, DELETE"},
		{oasCall{method: "GET", path: hooks + "/" + subAll.ID + "/test", key: key, status: 405, code: "method_not_allowed"}, "POST"},
		{oasCall{method: "POST", path: "/api/public/webhook-events", status: 405, code: "method_not_allowed"}, "GET"},
		{oasCall{method: "POST", path: deliveries, key: key, status: 405, code: "method_not_allowed"}, "GET"},
		{oasCall{method: "DELETE", path: deliveries + "/" + failedID, key: key, status: 405, code: "method_not_allowed"}, "GET"},
		{oasCall{method: "GET", path: deliveries + "/" + failedID + "/retry", key: key, status: 405, code: "method_not_allowed"}, "POST"},
		{oasCall{method: "GET", path: hooks + "/" + subAll.ID + "/deliveries", key: key, status: 404, code: "not_found"}, ""},
		{oasCall{method: "GET", path: "/api/v1/webhook-events", key: key, status: 404, code: "not_found"}, ""},
		// Where every route takes a key, a key is checked first.
		{oasCall{method: "GET", path: "/api/v1/webhook-events", status: 401, code: "unauthorized"}, ""},
		{oasCall{method: "DELETE", path: "/api/v1/offers", status: 401, code: "unauthorized"}, ""},
		// Paths are matched as sent, never redirected.
		{oasCall{method: "GET", path: "//api/v1/offers", key: key, status: 404, code: "not_found"}, ""},
	} {
		u.srv = srv
		if a := o.do(u.oasCall); a.header.Get("Allow") != u.allow {
			t.Errorf("%s: Allow %q, want %q", u.oasCall, a.header.Get("Allow"), u.allow)
		}
	}

	// --- Rate limits, on the instance that allows one request a minute.
	o.do(oasCall{srv: limited, method: "GET", path: "/api/v1/offers", key: limitedKey, status: 200})
	for _, c := range keyed {
		c.srv, c.key, c.status, c.code = limited, limitedKey, 429, "rate_limit_exceeded"
		a := o.do(c)
		if a.header.Get("X-RateLimit-Remaining") != "0" || a.header.Get("X-RateLimit-Limit") != "1" {
			t.Errorf("%s: rate-limit headers %v", c, a.header)
		}
	}
	// Postbacks count per token.
	inbound := "/postback?click_id=" + postbackClick + "&txn_id=T-9&token=" + postbackToken
	o.do(oasCall{srv: limited, method: "GET", path: inbound, status: 201})
	o.do(oasCall{srv: limited, method: "GET", path: inbound, status: 429, code: "rate_limit_exceeded"})
	o.do(oasCall{srv: limited, method: "POST", path: apply, status: 201, body: map[string]any{"name": "Late", "email": "late@example.com"}})
	o.do(oasCall{srv: limited, method: "POST", path: apply, status: 429, code: "rate_limit_exceeded", body: map[string]any{"name": "Later", "email": "later@example.com"}})
	// The event catalog has a per-IP budget of its own: the form used up
	// its budget, the catalog's is untouched.
	o.do(oasCall{srv: limited, method: "GET", path: "/api/public/webhook-events", status: 200})
	o.do(oasCall{srv: limited, method: "GET", path: "/api/public/webhook-events", status: 429, code: "rate_limit_exceeded"})

	// --- Health: no key, no rate limit; readiness fails with the store.
	call(oasCall{method: "GET", path: "/healthz", status: 200})
	call(oasCall{method: "GET", path: "/readyz", status: 200})
	downAPI := svc.API()
	downAPI.Store = failingStore{}
	down := httptest.NewServer(httpapi.New(downAPI, httpapi.Config{Logger: quiet}).Handler())
	t.Cleanup(down.Close)
	call(oasCall{srv: down, method: "GET", path: "/readyz", status: 503, code: "unavailable"})

	// --- The session covered the whole document.
	if missing := o.unseen(); len(missing) > 0 {
		t.Errorf("documented answers the session never produced (operationId status):\n  %s", strings.Join(missing, "\n  "))
	}
	if ops := o.operations(); len(ops) != 64 {
		t.Errorf("the document has %d operations, want the 64 routes of the API besides /_admin: %v", len(ops), ops)
	} else {
		t.Logf("checked %d exchanges against %d operations of %s", o.calls, len(ops), oasPath)
	}

	// --- The check is strict: a drifted answer fails it.
	good := withKey(oasCall{method: "GET", path: "/api/v1/offers/" + autoOffer.ID, status: 200})
	drifts := map[string]func(m map[string]any){
		"added field":       func(m map[string]any) { m["clicks"] = 0 },
		"missing field":     func(m map[string]any) { delete(m, "currency") },
		"null caps":         func(m map[string]any) { m["caps"] = nil },
		"cap set to zero":   func(m map[string]any) { m["caps"].(map[string]any)["daily"] = 0 },
		"seconds timestamp": func(m map[string]any) { m["createdAt"] = "2026-01-02T03:04:05Z" },
		"uppercase id":      func(m map[string]any) { m["id"] = strings.ToUpper(m["id"].(string)) },
		"unknown status":    func(m map[string]any) { m["status"] = "archived" },
	}
	for name, drift := range drifts {
		var m map[string]any
		good.into(t, &m)
		drift(m)
		body, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.recheck("GET", "/api/v1/offers/"+autoOffer.ID, oasAnswer{status: 200, header: good.header, body: body}); err == nil {
			t.Errorf("an Offer with a drift (%s) passes the document", name)
		}
	}
	deliveryDrifts := map[string]func(m map[string]any){
		"added field":                 func(m map[string]any) { m["body"] = "{}" },
		"attempt without outcome":     func(m map[string]any) { delete(oasAttempt0(m), "statusCode") },
		"unknown attempt error":       func(m map[string]any) { oasAttempt0(m)["error"] = "refused" },
		"attempt keeps too much":      func(m map[string]any) { oasAttempt0(m)["response"] = strings.Repeat("r", 4097) },
		"pending without next time":   func(m map[string]any) { m["status"] = "pending" },
		"failed with a next time":     func(m map[string]any) { m["nextAttemptAt"] = m["createdAt"] },
		"unknown status":              func(m map[string]any) { m["status"] = "retrying" },
		"event id in place of the id": func(m map[string]any) { m["id"] = m["eventId"] },
	}
	for name, drift := range deliveryDrifts {
		err := o.recheck("GET", deliveries+"/"+failedID, oasAnswer{status: 200, header: againAnswer.header, body: oasEdit(t, againAnswer.body, drift)})
		if err == nil {
			t.Errorf("a Delivery with a drift (%s) passes the document", name)
		}
	}
	sub := withKey(oasCall{method: "GET", path: hooks + "/" + subAll.ID, status: 200})
	if err := o.recheck("GET", hooks+"/"+subAll.ID, oasAnswer{status: 200, header: sub.header,
		body: oasEdit(t, sub.body, func(m map[string]any) { m["secret"] = secret })}); err == nil {
		t.Error("a Subscription that shows its secret passes the document")
	}
	if err := o.recheck("GET", "/api/public/webhook-events", oasAnswer{status: 200, header: catalogAnswer.header,
		body: oasEdit(t, catalogAnswer.body, func(m map[string]any) { m["nextCursor"] = "more" })}); err == nil {
		t.Error("a paged event catalog passes the document")
	}

	// A drifted delivery fails the webhooks section too.
	sample := okGot[0]
	webhookDrifts := map[string]func(d *oasDelivery){
		"added data field": func(d *oasDelivery) {
			d.body = oasEdit(t, d.body, func(m map[string]any) { m["data"].(map[string]any)["extra"] = 1 })
		},
		"added envelope field": func(d *oasDelivery) { d.body = oasEdit(t, d.body, func(m map[string]any) { m["attempt"] = 1 }) },
		"seconds timestamp": func(d *oasDelivery) {
			d.body = oasEdit(t, d.body, func(m map[string]any) { m["createdAt"] = "2026-01-02T03:04:05Z" })
		},
		"another event's body": func(d *oasDelivery) { d.header.Set(webhook.EventHeader, tally.EventCapReached) },
		"no webhook id":        func(d *oasDelivery) { d.header.Del(webhook.WebhookIDHeader) },
		"event id as webhook id": func(d *oasDelivery) {
			d.header.Set(webhook.WebhookIDHeader, oasAs[tally.Event](t, oasAnswer{body: d.body}).ID)
		},
		"malformed signature": func(d *oasDelivery) { d.header.Set(webhook.SignatureHeader, "v1="+strings.Repeat("0", 64)) },
		"not JSON":            func(d *oasDelivery) { d.header.Set("Content-Type", "text/plain") },
		"another user agent":  func(d *oasDelivery) { d.header.Set("User-Agent", "Go-http-client/1.1") },
		"GET":                 func(d *oasDelivery) { d.method = http.MethodGet },
	}
	if err := o.checkDelivery(sample); err != nil || sample.header.Get(webhook.EventHeader) == tally.EventCapReached {
		t.Fatalf("the sample delivery: %v", err)
	}
	for name, drift := range webhookDrifts {
		d := oasDelivery{method: sample.method, path: sample.path, header: sample.header.Clone(), body: bytes.Clone(sample.body)}
		drift(&d)
		if o.checkDelivery(d) == nil {
			t.Errorf("a webhook delivery with a drift (%s) passes the document", name)
		}
	}

	noLimitHeaders := good.header.Clone()
	noLimitHeaders.Del("X-RateLimit-Remaining")
	if err := o.recheck("GET", "/api/v1/offers/"+autoOffer.ID, oasAnswer{status: 200, header: noLimitHeaders, body: good.body}); err == nil {
		t.Error("an answer without X-RateLimit-Remaining passes the document")
	}
	if err := o.recheck("GET", "/api/v1/offers/"+autoOffer.ID, oasAnswer{status: 418, header: good.header, body: good.body}); err == nil {
		t.Error("an undocumented status passes the document")
	}
	if err := o.recheck("GET", "/api/v1/offers/"+noOffer, oasAnswer{status: 404, header: good.header,
		body: []byte(`{"error":{"code":"validation_error","message":"No offer."}}`)}); err == nil {
		t.Error("a 404 with another code than not_found passes the document")
	}
}

// recheck validates a made-up answer to a request, for the drift checks.
func (o *oasContract) recheck(method, path string, a oasAnswer) error {
	req, err := http.NewRequest(method, o.server+path, nil)
	if err != nil {
		return err
	}
	route, params, err := o.router.FindRoute(req)
	if err != nil {
		return err
	}
	return o.checkAnswer(&openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: o.opts}, a)
}

// oasEdit decodes a JSON object, lets edit change it, and encodes it again.
func oasEdit(t *testing.T, body []byte, edit func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// oasAttempt0 is the first attempt of a decoded Delivery.
func oasAttempt0(m map[string]any) map[string]any {
	return m["attempts"].([]any)[0].(map[string]any)
}
