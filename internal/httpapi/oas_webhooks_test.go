package httpapi_test

// The webhook side of the contract test: what Tally sends to receivers,
// checked against the document's top-level `webhooks` section, and the
// helpers that make deliveries happen inside the test's goroutine.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// oasDelivery is one webhook request as a receiver got it.
type oasDelivery struct {
	method string
	path   string // with the query
	header http.Header
	body   []byte
}

// oasReceiver is a webhook receiver on loopback that answers every request
// with one status and body, and keeps what it got.
type oasReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []oasDelivery
	status int
	answer string
}

func newOASReceiver(t *testing.T, status int, answer string) *oasReceiver {
	t.Helper()
	r := &oasReceiver{status: status, answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.got = append(r.got, oasDelivery{method: req.Method, path: req.URL.RequestURI(), header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		w.WriteHeader(r.status)
		_, _ = io.WriteString(w, r.answer)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// take returns what the receiver got since the last take.
func (r *oasReceiver) take() []oasDelivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

// webhookOperation returns the document's operation for a webhook event.
func (o *oasContract) webhookOperation(name string) (*openapi3.PathItem, error) {
	item := o.doc.Webhooks[name]
	if item == nil || item.Post == nil {
		return nil, fmt.Errorf("the document's webhooks section has no POST for event %q", name)
	}
	if len(item.Operations()) != 1 {
		return nil, fmt.Errorf("webhook %q: want only a POST operation", name)
	}
	return item, nil
}

// checkDelivery validates a webhook request against the document's webhooks
// entry for the event its X-Tally-Event header names: method, headers
// (X-Tally-Event, X-Tally-Webhook-Id, X-Tally-Signature, User-Agent),
// Content-Type and body. The body's own event must then agree with the
// header, since each entry's body schema fixes `event`.
func (o *oasContract) checkDelivery(d oasDelivery) error {
	name := d.header.Get(webhook.EventHeader)
	item, err := o.webhookOperation(name)
	if err != nil {
		return err
	}
	if d.method != http.MethodPost {
		return fmt.Errorf("webhook %s sent with %s, want POST", name, d.method)
	}
	req, err := http.NewRequest(d.method, "https://receiver.example"+d.path, bytes.NewReader(d.body))
	if err != nil {
		return err
	}
	req.Header = d.header.Clone()
	in := &openapi3filter.RequestValidationInput{
		Request: req,
		Route:   &routers.Route{Spec: o.doc, Path: name, PathItem: item, Method: http.MethodPost, Operation: item.Post},
		Options: o.opts,
	}
	if err := openapi3filter.ValidateRequest(o.t.Context(), in); err != nil {
		return fmt.Errorf("webhook %s: %w", name, err)
	}
	return nil
}

// oasSyntheticDelivery is body as Tally would send it for event name: the
// headers of a real delivery, signed with secret.
func oasSyntheticDelivery(name string, body []byte, secret string) oasDelivery {
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "Tally-Webhooks/1")
	h.Set(webhook.EventHeader, name)
	h.Set(webhook.WebhookIDHeader, "wh_01kb7k3m5n6p7q8r9s0t1v2w3x")
	if secret != "" {
		h.Set(webhook.SignatureHeader, webhook.Sign(secret, time.Now(), body))
	}
	return oasDelivery{method: http.MethodPost, path: "/tally", header: h, body: body}
}

// unseenWebhooks lists the webhooks of the document no delivery of the
// session matched, but those in except.
func (o *oasContract) unseenWebhooks(seen map[string]bool) []string {
	var missing []string
	for name := range o.doc.Webhooks {
		if !seen[name] {
			missing = append(missing, name)
		}
	}
	slices.Sort(missing)
	return missing
}

// oasDeliverAll does what the delivery pipeline does, in the test's
// goroutine so that the outcome is fixed: it fans out every event of the
// brand, then attempts each pending delivery until it is decided. Attempts
// follow each other at once, not after the schedule's waits, which only
// the pipeline keeps. Deliveries whose subscription was deleted are no
// longer found by fan-out; attempt those with oasAttemptAll.
func oasDeliverAll(t *testing.T, svc *service.Service, sender webhooks.Sender, brandID string) {
	t.Helper()
	ctx := t.Context()
	var refs []endpoints.DeliveryRef
	p := records.ListParams{Limit: records.MaxLimit}
	for {
		events, next, err := svc.Events.Events(ctx, brandID, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range events {
			r, err := svc.Webhooks.FanOut(ctx, e.ID)
			if err != nil {
				t.Fatalf("fan out %s: %v", e.ID, err)
			}
			refs = append(refs, r...)
		}
		if next == "" {
			break
		}
		p.Cursor = next
	}
	for _, ref := range refs {
		oasAttemptAll(t, svc, sender, ref)
	}
}

// oasAttemptAll makes the attempts of a delivery's current schedule until it
// is decided, and returns its final status.
func oasAttemptAll(t *testing.T, svc *service.Service, sender webhooks.Sender, ref endpoints.DeliveryRef) string {
	t.Helper()
	for n := 1; n <= webhooks.MaxAttempts; n++ {
		res, err := svc.Webhooks.Attempt(t.Context(), ref, n, sender)
		if err != nil {
			t.Fatalf("attempt %d of %s: %v", n, ref.DeliveryID, err)
		}
		if res.Status != tally.DeliveryPending {
			return res.Status
		}
	}
	t.Fatalf("delivery %s is still pending after %d attempts", ref.DeliveryID, webhooks.MaxAttempts)
	return ""
}

// oasSameJSON reports whether two JSON texts hold the same value (object
// member order and white space aside); the error shows both when not.
func oasSameJSON(got, want []byte) error {
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Errorf("not JSON: %v: %s", err, got)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return fmt.Errorf("not JSON: %v: %s", err, want)
	}
	if path, ok := oasFirstDiff(g, w, ""); !ok {
		return fmt.Errorf("differ at %s", path)
	}
	return nil
}

// oasFirstDiff compares two decoded JSON values and returns the JSON
// pointer of the first difference, and false, when they differ.
func oasFirstDiff(got, want any, at string) (string, bool) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s: got %v, want an object", oasPointer(at), got), false
		}
		for _, k := range slices.Sorted(maps.Keys(w)) {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s: missing", oasPointer(at+"/"+k)), false
			}
			if p, ok := oasFirstDiff(gv, w[k], at+"/"+k); !ok {
				return p, false
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[k]; !ok {
				return fmt.Sprintf("%s: not wanted", oasPointer(at+"/"+k)), false
			}
		}
		return "", true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s: got %v, want %v", oasPointer(at), got, want), false
		}
		for i := range w {
			if p, ok := oasFirstDiff(g[i], w[i], fmt.Sprintf("%s/%d", at, i)); !ok {
				return p, false
			}
		}
		return "", true
	default:
		if !reflect.DeepEqual(got, want) {
			return fmt.Sprintf("%s: got %#v, want %#v", oasPointer(at), got, want), false
		}
		return "", true
	}
}

func oasPointer(at string) string {
	if at == "" {
		return "the root"
	}
	return at
}

// oasComponentRef returns the component name a schema reference points at.
func oasComponentRef(ref *openapi3.SchemaRef) (string, error) {
	if ref == nil {
		return "", errors.New("no schema")
	}
	name, ok := strings.CutPrefix(ref.Ref, "#/components/schemas/")
	if !ok {
		return "", fmt.Errorf("%q is not a reference to components.schemas", ref.Ref)
	}
	return name, nil
}

// webhookSchemas follows a webhook entry's body schema: a reference to an
// event schema that is allOf the envelope and {event: const name, data:
// reference}. It returns the names of the envelope and data components.
func (o *oasContract) webhookSchemas(name string) (envelope, data string, err error) {
	item, err := o.webhookOperation(name)
	if err != nil {
		return "", "", err
	}
	body := item.Post.RequestBody
	if body == nil || body.Value == nil || !body.Value.Required {
		return "", "", fmt.Errorf("webhook %s: the request body must be required", name)
	}
	mt := body.Value.Content.Get("application/json")
	if mt == nil || len(body.Value.Content) != 1 {
		return "", "", fmt.Errorf("webhook %s: the body must be application/json only", name)
	}
	event, err := oasComponentRef(mt.Schema)
	if err != nil {
		return "", "", fmt.Errorf("webhook %s body: %w", name, err)
	}
	s := mt.Schema.Value
	if s == nil || len(s.AllOf) != 2 {
		return "", "", fmt.Errorf("webhook %s: %s must be allOf [envelope, {event, data}]", name, event)
	}
	if envelope, err = oasComponentRef(s.AllOf[0]); err != nil {
		return "", "", fmt.Errorf("webhook %s: %s allOf[0]: %w", name, event, err)
	}
	props := s.AllOf[1].Value.Properties
	if ev := props["event"]; ev == nil || ev.Value == nil || ev.Value.Const != name {
		return "", "", fmt.Errorf("webhook %s: %s must fix event to %q", name, event, name)
	}
	if data, err = oasComponentRef(props["data"]); err != nil {
		return "", "", fmt.Errorf("webhook %s: %s data: %w", name, event, err)
	}
	return envelope, data, nil
}

// componentJSON is a schema component as the validator sees it, as JSON.
func (o *oasContract) componentJSON(name string) ([]byte, error) {
	ref := o.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		return nil, fmt.Errorf("no components.schemas.%s", name)
	}
	return json.Marshal(ref.Value)
}
