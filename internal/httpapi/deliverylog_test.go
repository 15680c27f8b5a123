package httpapi_test

import (
	"net/http"
	"regexp"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/webhook"
)

// The delivery log shows what each delivery sent: method, URL, headers
// with the signature values masked, and the body as the receiver got it;
// a pending one says when its next attempt is due. conversionId keeps the
// deliveries of the events a conversion caused.
func TestDeliveryLogShowsTheRequest(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		hooks := newGetReceiver(t, func(int) int { return 200 })
		down := newGetReceiver(t, func(int) int { return 503 })
		tallySub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": hooks.srv.URL, "events": []string{"conversion.created"}, "secret": secret})).field(t, "id")
		stdSub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": down.srv.URL, "events": []string{"conversion.created"},
			"signatureScheme": "standard-webhooks"})).field(t, "id")
		e.must(200, e.call("PUT", "/api/v1/partners/"+partner+"/postback", key, map[string]any{"url": hooks.srv.URL + "/pb?c={conversion_id}"}))

		var convs []string
		for _, txn := range []string{"order-1", "order-2"} {
			convs = append(convs, e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": txn})).field(t, "id"))
		}
		e.waitFor(key, "", "attempt 1 of each", func(ds []tally.Delivery) bool { return len(ds) == 6 && attemptsMade(1)(ds) })

		if r := e.call("GET", "/api/v1/deliveries?conversionId=nope", key, nil); r.status != 422 || r.errorCode() != "validation_error" {
			t.Errorf("conversionId=nope: %d %s, want 422", r.status, r.body)
		}
		ds := e.deliveries(key, "conversionId="+convs[0])
		if len(ds) != 3 {
			t.Fatalf("%d deliveries of conversion %s, want its webhooks and its postback", len(ds), convs[0])
		}
		tallyMasked := regexp.MustCompile(`^t=[0-9]+,v1=\*{8}$`)
		stdMasked := regexp.MustCompile(`^v1,\*{8}$`)
		for _, d := range ds {
			if d.Event != tally.EventConversionCreated {
				t.Errorf("delivery %s of %s, want conversion.created", d.ID, d.Event)
			}
			var one tally.Delivery
			e.must(200, e.call("GET", "/api/v1/deliveries/"+d.ID, key, nil)).decode(t, &one)
			for _, got := range []tally.Delivery{d, one} {
				req := got.Request
				if req == nil || req.URL != d.URL || req.Headers[webhook.WebhookIDHeader] != d.ID || req.Headers[webhook.EventHeader] != d.Event {
					t.Fatalf("delivery %s shows the request %+v", d.ID, req)
				}
				switch {
				case d.Type == tally.DeliveryPostback:
					if req.Method != http.MethodGet || req.Body != nil || req.Headers[webhook.SignatureHeader] != "" {
						t.Errorf("postback %s shows %+v, want an unsigned GET without a body", d.ID, req)
					}
				case d.SubscriptionID == tallySub:
					if req.Method != http.MethodPost || !tallyMasked.MatchString(req.Headers[webhook.SignatureHeader]) {
						t.Errorf("webhook %s shows %s %q, want POST with the signature masked", d.ID, req.Method, req.Headers[webhook.SignatureHeader])
					}
					if req.Body == nil || !sentBody(hooks, d.ID, *req.Body) {
						t.Errorf("webhook %s shows a body the receiver did not get: %v", d.ID, req.Body)
					}
				case d.SubscriptionID == stdSub:
					if !stdMasked.MatchString(req.Headers[webhook.StandardSignatureHeader]) || req.Headers[webhook.StandardIDHeader] != d.ID {
						t.Errorf("standard webhook %s shows headers %v, want webhook-signature masked", d.ID, req.Headers)
					}
					if d.Status != tally.DeliveryPending || d.NextAttemptAt == nil || !d.NextAttemptAt.After(d.Attempts[0].At.Time) {
						t.Errorf("the pending delivery %s: %s, next attempt %v", d.ID, d.Status, d.NextAttemptAt)
					}
				}
			}
		}
	})
}

// sentBody says whether the receiver got body with the webhook id.
func sentBody(r *getReceiver, webhookID, body string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, req := range r.got {
		if req.Header.Get(webhook.WebhookIDHeader) == webhookID && string(r.bodies[i]) == body {
			return true
		}
	}
	return false
}
