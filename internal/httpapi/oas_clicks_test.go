package httpapi_test

// The tracking link and click part of the contract test.

import (
	"net/url"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/service"
)

// oasClickSetup is what the click part of the session starts from: an
// active offer, a paused one, and partners in each status.
type oasClickSetup struct {
	brand                    string
	offer, paused            tally.Offer
	active, rejected, banned string
	otherKey                 string
}

// oasClicks follows tracking links and reads the clicks back; it returns
// the id of a recorded click. The session's client sends Go's User-Agent,
// a bot's: each click it records is high-risk and emits fraud.high_risk.
func oasClicks(t *testing.T, call, withKey func(oasCall) oasAnswer, s oasClickSetup) string {
	t.Helper()
	link := "/c/" + s.offer.ID + "?pid=" + s.active
	first := call(oasCall{method: "GET", path: link + "&sub1=spring&sub2=" + url.QueryEscape("a b") + "&gclid=abc", status: 302})
	loc := first.header.Get("Location")
	clickID := strings.TrimPrefix(loc, "https://shop.example/run?click=")
	if !ids.Valid("clk_", clickID) {
		t.Fatalf("Location %q does not carry a click id", loc)
	}
	call(oasCall{method: "GET", path: link + "&sub5=x", status: 302})
	for _, path := range []string{
		"/c/" + s.offer.ID,
		"/c/" + s.offer.ID + "?pid=" + s.rejected,
		"/c/" + s.offer.ID + "?pid=" + s.banned,
		"/c/" + s.paused.ID + "?pid=" + s.active,
		"/c/" + ids.New("off_", s.offer.CreatedAt.Time) + "?pid=" + s.active,
	} {
		call(oasCall{method: "GET", path: path, status: 404, code: "not_found"})
	}
	call(oasCall{method: "GET", path: "/c/offer-1?pid=" + s.active, status: 404, code: "not_found"})
	call(oasCall{method: "GET", path: "/c/" + s.offer.ID + "?pid=partner-7", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "GET", path: link + "&sub3=" + strings.Repeat("s", 256), status: 422, code: "validation_error", invalid: true})
	call(oasCall{method: "GET", path: link + "&sub4=%07", status: 422, code: "validation_error"})
	call(oasCall{method: "GET", path: link + "&pid=" + s.active, status: 422, code: "validation_error"})

	got := oasAs[tally.Click](t, withKey(oasCall{method: "GET", path: "/api/v1/clicks/" + clickID, status: 200}))
	if got.Sub1 != "spring" || got.Sub2 != "a b" || got.PartnerID != s.active || got.BrandID != s.brand {
		t.Errorf("click %+v", got)
	}
	withKey(oasCall{method: "GET", path: "/api/v1/clicks/" + ids.New("clk_", got.CreatedAt.Time), status: 404, code: "not_found"})
	withKey(oasCall{method: "GET", path: "/api/v1/clicks/clk_nope", status: 404, code: "not_found", invalid: true})
	call(oasCall{method: "GET", path: "/api/v1/clicks/" + clickID, key: s.otherKey, status: 404, code: "not_found"})

	list := oasAs[struct{ Data []tally.Click }](t, withKey(oasCall{method: "GET", path: "/api/v1/clicks", status: 200}))
	if len(list.Data) != 2 || list.Data[1].ID != clickID {
		t.Errorf("clicks: want 2, newest first; got %+v", list.Data)
	}
	day := got.CreatedAt.Format("2006-01-02")
	for _, q := range []string{"offerId=" + s.offer.ID, "partnerId=" + s.active + "&minScore=0", "minScore=100", "from=" + day + "&to=" + day, "limit=1"} {
		withKey(oasCall{method: "GET", path: "/api/v1/clicks?" + q, status: 200})
	}
	for _, q := range []string{"minScore=101", "minScore=high", "offerId=off_1", "from=monday", "limit=0"} {
		withKey(oasCall{method: "GET", path: "/api/v1/clicks?" + q, status: 422, code: "validation_error", invalid: true})
	}
	withKey(oasCall{method: "GET", path: "/api/v1/clicks?minScore=07", status: 422, code: "validation_error"})
	withKey(oasCall{method: "GET", path: "/api/v1/clicks?score=5", status: 422, code: "validation_error"})
	if others := oasAs[struct{ Data []tally.Click }](t, call(oasCall{method: "GET", path: "/api/v1/clicks", key: s.otherKey, status: 200})); len(others.Data) != 0 {
		t.Errorf("another brand lists %d clicks", len(others.Data))
	}
	return clickID
}

// oasFraud reads and changes the fraud settings and the blocklist; it
// returns the id of a blocked range.
func oasFraud(t *testing.T, call, withKey func(oasCall) oasAnswer, otherKey string) string {
	t.Helper()
	settings := "/api/v1/fraud/settings"
	if got := oasAs[tally.FraudSettings](t, withKey(oasCall{method: "GET", path: settings, status: 200})); got != tally.DefaultFraudSettings {
		t.Errorf("default fraud settings %+v", got)
	}
	withKey(oasCall{method: "GET", path: settings + "?threshold=5", status: 422, code: "validation_error"})
	body := map[string]any{"threshold": 75, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 50, "windowHours": 12}}
	withKey(oasCall{method: "PUT", path: settings, status: 200, body: body})
	for _, bad := range []any{
		map[string]any{"threshold": 75},
		map[string]any{"threshold": 175, "autoBan": body["autoBan"]},
		map[string]any{"threshold": 75, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 50}},
		map[string]any{"threshold": 75, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 50, "windowHours": 1000}},
		map[string]any{"threshold": 75, "autoBan": body["autoBan"], "mode": "strict"},
	} {
		withKey(oasCall{method: "PUT", path: settings, status: 422, code: "validation_error", invalid: true, body: bad})
	}
	withKey(oasCall{method: "PUT", path: settings, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"threshold":`)})
	withKey(oasCall{method: "PUT", path: settings, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "PUT", path: settings, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})

	blocked := "/api/v1/fraud/blocked-ips"
	b := oasAs[tally.BlockedIP](t, withKey(oasCall{method: "POST", path: blocked, status: 201, body: map[string]any{"cidr": "203.0.113.0/24", "note": "click farm"}}))
	withKey(oasCall{method: "POST", path: blocked, status: 201, body: map[string]any{"cidr": "2001:db8::7"}})
	withKey(oasCall{method: "POST", path: blocked, status: 409, code: "conflict", body: map[string]any{"cidr": "203.0.113.9/24"}})
	withKey(oasCall{method: "POST", path: blocked, status: 422, code: "validation_error", body: map[string]any{"cidr": "203.0.113.0/40"}})
	withKey(oasCall{method: "POST", path: blocked, status: 422, code: "validation_error", invalid: true, body: map[string]any{"note": "no range"}})
	withKey(oasCall{method: "POST", path: blocked, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"cidr"`)})
	withKey(oasCall{method: "POST", path: blocked, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "POST", path: blocked, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	list := oasAs[struct{ Data []tally.BlockedIP }](t, withKey(oasCall{method: "GET", path: blocked, status: 200}))
	if len(list.Data) != 2 || list.Data[1].ID != b.ID || list.Data[0].CIDR != "2001:db8::7/128" {
		t.Errorf("blocked ranges %+v", list.Data)
	}
	withKey(oasCall{method: "GET", path: blocked + "?limit=1", status: 200})
	withKey(oasCall{method: "GET", path: blocked + "?limit=0", status: 422, code: "validation_error", invalid: true})
	call(oasCall{method: "DELETE", path: blocked + "/" + b.ID, key: otherKey, status: 404, code: "not_found"})
	gone := oasAs[tally.BlockedIP](t, withKey(oasCall{method: "DELETE", path: blocked + "/" + b.ID, status: 200}))
	if gone != b {
		t.Errorf("DELETE answered %+v, want %+v", gone, b)
	}
	withKey(oasCall{method: "DELETE", path: blocked + "/" + b.ID, status: 404, code: "not_found"})
	withKey(oasCall{method: "DELETE", path: blocked + "/bip_1", status: 404, code: "not_found", invalid: true})
	return list.Data[0].ID
}

// oasAttribution changes an offer, records conversions of clicks (POST
// /conversions with clickId, and the advertisers' GET /postback) and
// manages the postback token, on a brand of its own so that the rest of the
// session's counts stay as they are. It returns that brand's token and a
// click of it, for the rate-limit checks.
func oasAttribution(t *testing.T, call func(oasCall) oasAnswer, svc *service.Service) (token, clickID string) {
	t.Helper()
	ctx := t.Context()
	b, err := svc.Identity.CreateBrand(ctx, "Attribution Brand")
	if err != nil {
		t.Fatal(err)
	}
	_, key, err := svc.Identity.CreateAPIKey(ctx, b.ID)
	if err != nil {
		t.Fatal(err)
	}
	withKey := func(c oasCall) oasAnswer {
		t.Helper()
		c.key = key
		return call(c)
	}
	offer := oasAs[tally.Offer](t, withKey(oasCall{method: "POST", path: "/api/v1/offers", status: 201, body: map[string]any{
		"name": "Trail shoes", "destinationUrl": "https://shop.example/trail?c={click_id}", "revenueCents": 8000, "payoutCents": 1200, "currency": "EUR",
		"attributionWindowDays": 14,
	}}))
	partner := oasAs[tally.Partner](t, call(oasCall{method: "POST", path: "/api/public/brands/" + b.ID + "/applications", status: 201,
		body: map[string]any{"name": "Trail Blog", "email": "hi@trailblog.example"}}))
	withKey(oasCall{method: "POST", path: "/api/v1/partners/" + partner.ID + "/approve", status: 200})

	// PATCH the offer.
	path := "/api/v1/offers/" + offer.ID
	patched := oasAs[tally.Offer](t, withKey(oasCall{method: "PATCH", path: path, status: 200, body: map[string]any{
		"payoutCents": 1500, "caps": map[string]any{"daily": 100, "weekly": nil}, "currency": "EUR"}}))
	if patched.PayoutCents != 1500 || patched.Caps.Daily == nil || patched.RevenueCents != 8000 || patched.AttributionWindowDays != 14 {
		t.Errorf("patched offer %+v", patched)
	}
	withKey(oasCall{method: "PATCH", path: path, status: 200, body: map[string]any{}})
	withKey(oasCall{method: "PATCH", path: path, status: 422, code: "validation_error", body: map[string]any{"currency": "USD"}})
	withKey(oasCall{method: "PATCH", path: path, status: 422, code: "validation_error", body: map[string]any{"holdHours": 12}})
	for _, bad := range []any{
		map[string]any{"status": "archived"},
		map[string]any{"attributionWindowDays": 0},
		map[string]any{"caps": map[string]any{"hourly": 3}},
		map[string]any{"payoutCents": "12"},
		map[string]any{"owner": "me"},
	} {
		withKey(oasCall{method: "PATCH", path: path, status: 422, code: "validation_error", invalid: true, body: bad})
	}
	withKey(oasCall{method: "PATCH", path: path, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"name":`)})
	withKey(oasCall{method: "PATCH", path: path, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "PATCH", path: path, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "PATCH", path: "/api/v1/offers/" + ids.New("off_", offer.CreatedAt.Time), status: 404, code: "not_found", body: map[string]any{"name": "X"}})

	// A click, and its conversion through the API.
	loc := call(oasCall{method: "GET", path: "/c/" + offer.ID + "?pid=" + partner.ID + "&sub1=trail", status: 302}).header.Get("Location")
	clickID = strings.TrimPrefix(loc, "https://shop.example/trail?c=")
	conv := oasAs[tally.Conversion](t, withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 201,
		body: map[string]any{"clickId": clickID, "externalTxnId": "T-1"}}))
	if conv.ClickID != clickID || conv.PartnerID != partner.ID || conv.Sub1 != "trail" || conv.PayoutCents != 1500 {
		t.Errorf("conversion of a click %+v", conv)
	}
	withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 200, body: map[string]any{"clickId": clickID, "offerId": offer.ID, "externalTxnId": "T-1"}})
	withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 422, code: "validation_error",
		body: map[string]any{"clickId": ids.New("clk_", conv.CreatedAt.Time)}})
	withKey(oasCall{method: "POST", path: "/api/v1/conversions", status: 422, code: "validation_error", invalid: true,
		body: map[string]any{"clickId": clickID, "partnerId": partner.ID, "offerId": offer.ID}})

	// The postback token and the advertisers' GET postback.
	tokenPath := "/api/v1/postback-token"
	withKey(oasCall{method: "GET", path: tokenPath, status: 404, code: "not_found"})
	withKey(oasCall{method: "DELETE", path: tokenPath, status: 404, code: "not_found"})
	first := oasAs[identity.CreatedPostbackToken](t, withKey(oasCall{method: "POST", path: tokenPath, status: 201}))
	shown := withKey(oasCall{method: "GET", path: tokenPath, status: 200})
	if strings.Contains(string(shown.body), first.Token) {
		t.Error("GET postback-token shows the secret")
	}
	for _, m := range []string{"GET", "POST", "DELETE"} {
		withKey(oasCall{method: m, path: tokenPath + "?force=1", status: 422, code: "validation_error"})
	}
	gone := oasAs[tally.PostbackToken](t, withKey(oasCall{method: "DELETE", path: tokenPath, status: 200}))
	if gone != first.PostbackToken {
		t.Errorf("DELETE answered %+v, want %+v", gone, first.PostbackToken)
	}
	token = oasAs[identity.CreatedPostbackToken](t, withKey(oasCall{method: "POST", path: tokenPath, status: 201})).Token

	pb := "/postback?click_id=" + clickID + "&token=" + token
	created := oasAs[struct{ ConversionID string }](t, call(oasCall{method: "GET", path: pb + "&txn_id=T-2&amount=79.50", status: 201}))
	c2 := oasAs[tally.Conversion](t, withKey(oasCall{method: "GET", path: "/api/v1/conversions/" + created.ConversionID, status: 200}))
	if c2.RevenueCents != 7950 || c2.Currency != "EUR" || c2.ClickID != clickID {
		t.Errorf("postback conversion %+v", c2)
	}
	call(oasCall{method: "GET", path: pb + "&txn_id=T-2&amount=79.50", status: 200})
	call(oasCall{method: "GET", path: pb + "&txn_id=T-3&amount=1.234", status: 422, code: "validation_error"})             // EUR has 2 decimals
	call(oasCall{method: "GET", path: pb + "&txn_id=T-3&amount=1.23&currency=KWD", status: 422, code: "validation_error"}) // the payout is in EUR
	call(oasCall{method: "GET", path: pb + "&txn_id=T-3&amount=1.23&currency=EUR", status: 201})
	call(oasCall{method: "GET", path: pb + "&txn_id=T-4&payout=5", status: 422, code: "validation_error"})
	call(oasCall{method: "GET", path: "/postback?token=" + token, status: 422, code: "validation_error", invalid: true})
	call(oasCall{method: "GET", path: "/postback?click_id=" + clickID + "&token=" + first.Token, status: 401, code: "unauthorized"})
	call(oasCall{method: "GET", path: "/postback?click_id=" + clickID, status: 401, code: "unauthorized", invalid: true})
	return token, clickID
}
