// Package outgoing is the request a webhook delivery or partner postback
// sends: its method, URL, headers signed by the subscription's scheme, and
// body. internal/delivery sends it; the delivery log shows it (Shown)
// without linking the HTTP client that sends.
package outgoing

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/trace"
	"github.com/tally-hq/tally/webhook"
)

// UserAgent is sent with every delivery.
const UserAgent = "Tally-Webhooks/1"

// Request is one delivery attempt's input.
type Request struct {
	// Method is POST (the default) for a webhook; a partner postback is a
	// GET of its filled-in URL, with no body and no signature.
	Method    string
	URL       string // the subscription's URL, or the postback's filled in
	WebhookID string // wh_…, sent as X-Tally-Webhook-Id; the same on every retry
	Event     string // sent as X-Tally-Event
	Body      []byte // the envelope JSON, sent as is
	// Secrets are the subscription's signing secrets (two while a rotated
	// secret still signs): one v1 each. None sends no X-Tally-Signature.
	Secrets []string
	// Scheme is how the secrets sign: tally.SchemeTally (or empty), or
	// tally.SchemeStandardWebhooks, whose Secrets are whsec_ secrets or
	// whsk_ Ed25519 keys (webhook.SignStandard).
	Scheme string
	// Traceparent, when set, is sent as the W3C traceparent header: the
	// attempt's span in the trace of the request that caused the event.
	Traceparent string
}

// MethodOrPost is the request's method: POST unless it says otherwise.
func (r Request) MethodOrPost() string {
	if r.Method == "" {
		return http.MethodPost
	}
	return r.Method
}

// SetHeader sets the headers of r sent at now, signed afresh.
func (r Request) SetHeader(h http.Header, now time.Time) error {
	post := r.MethodOrPost() == http.MethodPost
	if post {
		h.Set("Content-Type", "application/json")
	}
	h.Set("User-Agent", UserAgent)
	h.Set(webhook.EventHeader, r.Event)
	h.Set(webhook.WebhookIDHeader, r.WebhookID)
	switch {
	case len(r.Secrets) == 0 || !post:
	case r.Scheme == tally.SchemeStandardWebhooks:
		sig, err := webhook.SignStandard(r.Secrets, r.WebhookID, now, r.Body)
		if err != nil {
			return err
		}
		h.Set(webhook.StandardIDHeader, r.WebhookID)
		h.Set(webhook.StandardTimestampHeader, strconv.FormatInt(now.Unix(), 10))
		h.Set(webhook.StandardSignatureHeader, sig)
	default:
		h.Set(webhook.SignatureHeader, webhook.SignEach(r.Secrets, now, r.Body))
	}
	if r.Traceparent != "" {
		h.Set(trace.Header, r.Traceparent)
	}
	return nil
}

// Shown is r as the delivery log shows it, sent at now: its method, URL,
// headers with the signature values masked (the header, the timestamp and
// each signature's version stay, so a receiver can see which scheme and
// how many secrets signed), and body (nil for a GET, or when r has none).
func (r Request) Shown(now time.Time) tally.DeliveryRequest {
	h := http.Header{}
	_ = r.SetHeader(h, now) // keys are checked when stored
	out := tally.DeliveryRequest{Method: r.MethodOrPost(), URL: r.URL, Headers: make(map[string]string, len(h))}
	for k, v := range h {
		out.Headers[k] = strings.Join(v, ", ")
	}
	for _, k := range []string{webhook.SignatureHeader, webhook.StandardSignatureHeader} {
		if v, ok := out.Headers[k]; ok {
			out.Headers[k] = signatureValue.ReplaceAllString(v, "${1}"+Masked)
		}
	}
	if out.Method == http.MethodPost && r.Body != nil {
		out.Body = ptrTo(string(r.Body))
	}
	return out
}

// Masked stands in for a signature in the delivery log.
const Masked = "********"

// signatureValue matches each signature of a signature header: v1=… of
// X-Tally-Signature, v1,… and v1a,… of webhook-signature.
var signatureValue = regexp.MustCompile(`(v1a?[=,])[^, ]+`)

func ptrTo[T any](v T) *T { return &v }
