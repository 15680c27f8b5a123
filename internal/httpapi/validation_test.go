package httpapi_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000})
	brandID, key := e.brand()
	offerID := e.offer(key, nil)
	partnerID := e.activePartner(brandID, key)
	valid := map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/p", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"}
	with := func(k string, v any) map[string]any {
		m := map[string]any{}
		for kk, vv := range valid {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}

	for _, tc := range []struct {
		name, path string
		body       any
		status     int
		code       string
		mentions   string // the message names the field
	}{
		{"missing name", "/api/v1/offers", with("name", nil), 422, "validation_error", "name"},
		{"blank name", "/api/v1/offers", with("name", "  "), 422, "validation_error", "name"},
		{"long name", "/api/v1/offers", with("name", strings.Repeat("x", 201)), 422, "validation_error", "name"},
		{"name not a string", "/api/v1/offers", with("name", 5), 422, "validation_error", "name"},
		{"relative url", "/api/v1/offers", with("destinationUrl", "/p"), 422, "validation_error", "destinationUrl"},
		{"ftp url", "/api/v1/offers", with("destinationUrl", "ftp://x.example/"), 422, "validation_error", "destinationUrl"},
		{"negative revenue", "/api/v1/offers", with("revenueCents", -1), 422, "validation_error", "revenueCents"},
		{"fractional payout", "/api/v1/offers", with("payoutCents", 1.5), 422, "validation_error", "payoutCents"},
		{"revenue as string", "/api/v1/offers", with("revenueCents", "100"), 422, "validation_error", "revenueCents"},
		{"lowercase currency", "/api/v1/offers", with("currency", "usd"), 422, "validation_error", "currency"},
		{"unknown currency", "/api/v1/offers", with("currency", "ABC"), 422, "validation_error", "currency"},
		{"bad status", "/api/v1/offers", with("status", "live"), 422, "validation_error", "status"},
		{"bad approval", "/api/v1/offers", with("approval", "sometimes"), 422, "validation_error", "approval"},
		{"hold on auto offer", "/api/v1/offers", with("holdHours", 24), 422, "validation_error", "holdHours"},
		{"zero cap", "/api/v1/offers", with("caps", map[string]any{"daily": 0}), 422, "validation_error", "caps.daily"},
		{"unknown cap", "/api/v1/offers", with("caps", map[string]any{"hourly": 5}), 422, "validation_error", "hourly"},
		{"unknown field", "/api/v1/offers", with("colour", "red"), 422, "validation_error", "colour"},
		{"array body", "/api/v1/offers", "[]", 422, "validation_error", "object"},
		{"malformed json", "/api/v1/offers", `{"name": "x",`, 400, "invalid_json", "JSON"},
		{"trailing data", "/api/v1/offers", `{} {}`, 400, "invalid_json", "JSON"},
		{"empty body", "/api/v1/offers", "", 400, "invalid_json", "empty"},
		{"conversion without offer", "/api/v1/conversions", map[string]any{"partnerId": partnerID}, 422, "validation_error", "offerId"},
		{"conversion without partner", "/api/v1/conversions", map[string]any{"offerId": offerID}, 422, "validation_error", "partnerId"},
		{"conversion on unknown offer", "/api/v1/conversions", map[string]any{"offerId": "off_01jd0000000000000000000000", "partnerId": partnerID}, 422, "validation_error", "offerId"},
		{"conversion with long sub1", "/api/v1/conversions", map[string]any{"offerId": offerID, "partnerId": partnerID, "sub1": strings.Repeat("s", 256)}, 422, "validation_error", "sub1"},
		{"conversion with bad currency", "/api/v1/conversions", map[string]any{"offerId": offerID, "partnerId": partnerID, "currency": "EURO"}, 422, "validation_error", "currency"},
		{"conversion with control characters", "/api/v1/conversions", map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "a\nb"}, 422, "validation_error", "externalTxnId"},
		{"application with bad email", "/api/public/brands/" + brandID + "/applications", map[string]any{"name": "P", "email": "nope"}, 422, "validation_error", "email"},
		{"both payouts", "/api/v1/offers", with("payoutPercent", 10), 422, "validation_error", "payoutPercent"},
		{"no payout", "/api/v1/offers", with("payoutCents", nil), 422, "validation_error", "payoutCents"},
		{"percent over 100", "/api/v1/offers", map[string]any{"name": "S", "destinationUrl": "https://shop.example/p", "revenueCents": 1, "currency": "USD", "payoutPercent": 100.01}, 422, "validation_error", "payoutPercent"},
		{"percent with three decimals", "/api/v1/offers", map[string]any{"name": "S", "destinationUrl": "https://shop.example/p", "revenueCents": 1, "currency": "USD", "payoutPercent": 12.345}, 422, "validation_error", "payoutPercent"},
		{"reversal without reason", "/api/v1/conversions/cnv_01jd0000000000000000000000/reverse", map[string]any{}, 422, "validation_error", "reason"},
		{"payout without currency", "/api/v1/payouts", map[string]any{}, 422, "validation_error", "currency"},
		{"payout nobody is owed", "/api/v1/payouts", map[string]any{"currency": "USD"}, 422, "validation_error", "currency"},
		{"payout through a bad date", "/api/v1/payouts", map[string]any{"currency": "USD", "through": "30/11/2026"}, 422, "validation_error", "through"},
		{"payout through the future", "/api/v1/payouts", map[string]any{"currency": "USD", "through": "2999-01-01"}, 422, "validation_error", "through"},
		{"payout for a bad partner id", "/api/v1/payouts", map[string]any{"currency": "USD", "partnerIds": []string{"alice"}}, 422, "validation_error", "partnerIds"},
	} {
		r := e.call("POST", tc.path, key, tc.body)
		if r.status != tc.status || r.errorCode() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, r.status, r.body, tc.status, tc.code)
			continue
		}
		var body struct{ Error struct{ Message string } }
		r.decode(t, &body)
		if !strings.Contains(body.Error.Message, tc.mentions) {
			t.Errorf("%s: message %q does not mention %q", tc.name, body.Error.Message, tc.mentions)
		}
	}

	// Wrong content type and oversized bodies.
	req, _ := http.NewRequest("POST", e.srv.URL+"/api/v1/offers", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "text/plain")
	if r, err := e.send(req); err != nil || r.status != 415 || r.errorCode() != "unsupported_media_type" {
		t.Errorf("text/plain body: %d %s %v, want 415", r.status, r.body, err)
	}
	big := `{"name": "` + strings.Repeat("x", httpapi.MaxBodyBytes) + `"}`
	if r := e.call("POST", "/api/v1/offers", key, big); r.status != 413 || r.errorCode() != "payload_too_large" {
		t.Errorf("oversized body: %d %.200s, want 413", r.status, r.body)
	}
	// Query parameters are checked too.
	for _, path := range []string{"/api/v1/offers?limit=0", "/api/v1/offers?limit=abc", "/api/v1/offers?limit=101",
		"/api/v1/conversions?sort=asc", "/api/v1/conversions?status=done", "/api/v1/conversions?from=yesterday",
		"/api/v1/partners?status=a&status=b", "/api/v1/reports?groupBy=hour", "/api/v1/conversions?offerId=x", "/api/v1/reports?partnerId=off_1",
		"/api/v1/payouts?status=late", "/api/v1/payouts?limit=0"} {
		if r := e.call("GET", path, key, nil); r.status != 422 || r.errorCode() != "validation_error" {
			t.Errorf("GET %s: %d %s, want 422", path, r.status, r.body)
		}
	}

	// A filter's message lists the values it takes, not the empty one
	// that stands for no filter.
	for path, want := range map[string]string{
		"/api/v1/conversions?status=done": "status must be one of: pending, approved, rejected, reversed.",
		"/api/v1/partners?status=done":    "status must be one of: applied, active, rejected, banned.",
		"/api/v1/deliveries?type=sms":     "type must be one of: webhook, postback.",
	} {
		if r := e.call("GET", path, key, nil); r.status != 422 || !strings.Contains(string(r.body), want) {
			t.Errorf("GET %s: %d %s, want 422 saying %q", path, r.status, r.body, want)
		}
	}

	// Unknown query parameters are refused on every route, those that name
	// a record or take a body too, before anything changes.
	sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": "https://hooks.example.com/x", "events": []string{"cap.reached"}})).field(t, "id")
	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/api/v1/offers/" + offerID + "?colour=red", nil},
		{"POST", "/api/v1/partners/" + partnerID + "/ban?reason=spam", nil},
		{"POST", "/api/public/webhooks/" + sub + "/test?event=cap.reached", nil},
		{"DELETE", "/api/public/webhooks/" + sub + "?force=1", nil},
		{"POST", "/api/v1/offers?dryRun=1", valid},
		{"POST", "/api/v1/conversions?source=x", map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "q-1"}},
		{"PATCH", "/api/v1/offers/" + offerID + "?x=1", map[string]any{"status": "paused"}},
		{"PUT", "/api/v1/offers/" + offerID + "/partners/" + partnerID + "/terms?x=1", map[string]any{"payoutCents": 5}},
		{"POST", "/api/v1/partners/" + partnerID + "/reactivate?x=1", nil},
		{"GET", "/api/v1/partners/" + partnerID + "/balance?currency=USD", nil},
		{"POST", "/api/v1/payouts?dryRun=1", map[string]any{"currency": "USD"}},
	} {
		if r := e.call(c.method, c.path, key, c.body); r.status != 422 || !strings.Contains(string(r.body), "Unknown query parameter") {
			t.Errorf("%s %s: %d %s, want 422 naming the parameter", c.method, c.path, r.status, r.body)
		}
	}
	if got := e.must(200, e.call("GET", "/api/v1/partners/"+partnerID, key, nil)).field(t, "status"); got != "active" {
		t.Errorf("partner %s after a refused ban, want active", got)
	}
	if got := e.must(200, e.call("GET", "/api/v1/offers/"+offerID, key, nil)).field(t, "status"); got != "active" {
		t.Errorf("offer %s after a refused change, want active", got)
	}
	e.must(200, e.call("GET", "/api/public/webhooks/"+sub, key, nil))
	if n := eventCount(t, e.svc, brandID, "webhook.test"); n != 0 {
		t.Errorf("%d test events after a refused test, want none", n)
	}

	// Nothing was created by any of it.
	if got := e.listAll("/api/v1/offers", key); len(got) != 1 {
		t.Errorf("%d offers after bad requests, want only the first", len(got))
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 0 {
		t.Errorf("%d conversions after bad requests, want none", len(got))
	}
	if got := e.listAll("/api/v1/payouts", key); len(got) != 0 {
		t.Errorf("%d payouts after bad requests, want none", len(got))
	}
	e.must(404, e.call("GET", "/api/v1/offers/"+offerID+"/partners/"+partnerID+"/terms", key, nil))
}

func TestUnknownRoutesAndMethodsAnswerInTheErrorShape(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{})
	_, key := e.brand()
	if r := e.call("GET", "/api/v1/nothing", key, nil); r.status != 404 || r.errorCode() != "not_found" {
		t.Errorf("unknown route: %d %s", r.status, r.body)
	}
	if r := e.call("GET", "/api/v1/offers/off_01jd0000000000000000000000", key, nil); r.status != 404 || r.errorCode() != "not_found" {
		t.Errorf("unknown offer: %d %s", r.status, r.body)
	}
	r := e.call("DELETE", "/api/v1/offers", key, nil)
	if r.status != 405 || r.errorCode() != "method_not_allowed" || r.header.Get("Allow") != "GET, POST" {
		t.Errorf("DELETE /offers: %d %s Allow=%q", r.status, r.body, r.header.Get("Allow"))
	}
	if r := e.call("GET", "/_admin/brands", "", nil); r.status != 404 {
		t.Errorf("admin API without a token configured: %d, want 404", r.status)
	}
}

func TestFallbackAnswersWhatNoRouteMatches(t *testing.T) {
	svc := servicetest.New(testenv.Bolt(t))
	srv := httptest.NewServer(httpapi.New(svc.API(), httpapi.Config{Logger: slog.New(slog.DiscardHandler)}).Handler(httpapi.GroupFallback))
	defer srv.Close()
	e := &env{t: t, svc: svc, srv: srv}
	_, key := e.brand()
	r := e.call("DELETE", "/api/v1/conversions", key, nil)
	if r.status != 405 || r.errorCode() != "method_not_allowed" || r.header.Get("Allow") != "POST, GET" || r.header.Get("X-RateLimit-Remaining") == "" {
		t.Errorf("DELETE /api/v1/conversions: %d %s Allow=%q, want 405 naming POST, GET, with rate-limit headers", r.status, r.body, r.header.Get("Allow"))
	}
	if r := e.call("DELETE", "/api/v1/conversions", "", nil); r.status != 401 || r.header.Get("X-RateLimit-Remaining") == "" {
		t.Errorf("DELETE /api/v1/conversions without a key: %d %s, want 401 with rate-limit headers", r.status, r.body)
	}
	if r := e.call("GET", "/api/v2/offers", "", nil); r.status != 404 || r.errorCode() != "not_found" {
		t.Errorf("unknown path: %d %s, want 404 not_found", r.status, r.body)
	}
	// It serves nothing itself: a known route is still "not allowed" here,
	// because API Gateway sends it to its own function.
	if r := e.call("GET", "/api/v1/offers", key, nil); r.status != 405 {
		t.Errorf("GET /api/v1/offers through the fallback: %d, want 405", r.status)
	}
}
