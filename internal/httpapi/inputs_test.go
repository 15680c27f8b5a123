package httpapi_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// badInput is a request that must be refused, with the status and code it
// must get and a word the message must contain.
type badInput struct {
	name, path string
	body       any // a value sent as JSON, or a string sent as is
	status     int
	code       string
	mentions   string
}

// refuses sends each request and checks the answer.
func (e *env) refuses(key string, cases []badInput) {
	e.t.Helper()
	for _, tc := range cases {
		r := e.call("POST", tc.path, key, tc.body)
		var body struct {
			Error struct{ Code, Message string }
		}
		_ = json.Unmarshal(r.body, &body)
		if r.status != tc.status || body.Error.Code != tc.code || !strings.Contains(body.Error.Message, tc.mentions) {
			e.t.Errorf("%s: %d %s, want %d %s mentioning %q", tc.name, r.status, r.body, tc.status, tc.code, tc.mentions)
		}
	}
}

func TestTextFieldsRefuseCharactersThatHideWhatTheySay(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000, ApplicationRateLimit: 10_000}, service.WithLoopbackReceivers())
		brandID, key := e.brand()
		offerID := e.offer(key, nil)
		partnerID := e.activePartner(brandID, key)
		offer := func(field string, v any) map[string]any {
			m := map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/p", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"}
			m[field] = v
			return m
		}
		apply := "/api/public/brands/" + brandID + "/applications"
		conversion := func(field, v string) map[string]any {
			return map[string]any{"offerId": offerID, "partnerId": partnerID, field: v}
		}
		hook := func(field, v string) map[string]any {
			m := map[string]any{"url": "https://hooks.example.com/x", "events": []string{"cap.reached"}, "secret": "whsec_0123456789abcdef"}
			m[field] = v
			return m
		}
		e.refuses(key, []badInput{
			{"offer name with a right-to-left override", "/api/v1/offers", offer("name", "Shoes\u202Eexe.gpj"), 422, "validation_error", "name"},
			{"offer name with a bidi isolate", "/api/v1/offers", offer("name", "\u2066Shoes"), 422, "validation_error", "name"},
			{"offer name with NUL", "/api/v1/offers", offer("name", "Sho\x00es"), 422, "validation_error", "name"},
			{"offer name with a line break", "/api/v1/offers", offer("name", "Shoes\nSale"), 422, "validation_error", "name"},
			{"offer name with a C1 control", "/api/v1/offers", offer("name", "Shoes\u0085"), 422, "validation_error", "name"},
			{"offer name with a line separator", "/api/v1/offers", offer("name", "Shoes\u2028"), 422, "validation_error", "name"},
			{"destination with an override", "/api/v1/offers", offer("destinationUrl", "https://shop.example/\u202E"), 422, "validation_error", "destinationUrl"},
			{"application name with an override (no key)", apply, map[string]any{"name": "Pat\u202E", "email": "pat1@example.com"}, 422, "validation_error", "name"},
			{"application message with an override", apply, map[string]any{"name": "Pat", "email": "pat2@example.com", "message": "hi\u202E"}, 422, "validation_error", "message"},
			{"application message with NUL", apply, map[string]any{"name": "Pat", "email": "pat3@example.com", "message": "hi\x00"}, 422, "validation_error", "message"},
			{"application website with a control", apply, map[string]any{"name": "Pat", "email": "pat4@example.com", "website": "https://pat.example/\x07"}, 422, "validation_error", "website"},
			{"conversion sub1 with a control", "/api/v1/conversions", conversion("sub1", "a\x01"), 422, "validation_error", "sub1"},
			{"conversion externalTxnId with an override", "/api/v1/conversions", conversion("externalTxnId", "order-1\u202E"), 422, "validation_error", "externalTxnId"},
			// Optional fields of nothing but such characters are refused too,
			// not taken for blank and stored as they are.
			{"conversion externalTxnId of a line break alone", "/api/v1/conversions", conversion("externalTxnId", "\r\n"), 422, "validation_error", "externalTxnId"},
			{"conversion sub2 of a tab alone", "/api/v1/conversions", conversion("sub2", "\t"), 422, "validation_error", "sub2"},
			{"application website of a line separator alone", apply, map[string]any{"name": "Pat", "email": "pat7@example.com", "website": "\u2028"}, 422, "validation_error", "website"},
			{"subscription url with an override", "/api/public/webhooks", hook("url", "https://hooks.example.com/\u202E"), 422, "validation_error", "url"},
			{"subscription secret with a control", "/api/public/webhooks", hook("secret", "whsec_0123456789\x1b"), 422, "validation_error", "secret"},
			// Bytes that are not UTF-8, and escapes that are not characters:
			// refused, not replaced with U+FFFD.
			{"invalid UTF-8 in a name", "/api/v1/offers", `{"name":"Sho` + "\xff" + `es","destinationUrl":"https://shop.example/p","revenueCents":1,"payoutCents":1,"currency":"USD"}`, 400, "invalid_json", "UTF-8"},
			{"invalid UTF-8 through the form", apply, `{"name":"P` + "\xc3" + `","email":"pat5@example.com"}`, 400, "invalid_json", "UTF-8"},
			{"a lone surrogate escape", "/api/v1/offers", `{"name":"Sho\ud800es","destinationUrl":"https://shop.example/p","revenueCents":1,"payoutCents":1,"currency":"USD"}`, 400, "invalid_json", "surrogate"},
			{"a low surrogate alone", apply, `{"name":"P\udc00","email":"pat6@example.com"}`, 400, "invalid_json", "surrogate"},
		})
		if got := e.listAll("/api/v1/offers", key); len(got) != 1 {
			t.Errorf("%d offers after refused requests, want only the first", len(got))
		}
		if got := e.listAll("/api/v1/partners", key); len(got) != 1 {
			t.Errorf("%d partners after refused applications, want only the first", len(got))
		}
		if got := e.listAll("/api/v1/conversions", key); len(got) != 0 {
			t.Errorf("%d conversions after refused requests, want none", len(got))
		}
		// Text that merely is not ASCII is fine, line breaks in a message
		// too, and so is U+FFFD sent on purpose or a surrogate pair escaped.
		e.must(201, e.call("POST", "/api/v1/offers", key, offer("name", "Café 👟 — Größe 42 \uFFFD")))
		e.must(201, e.call("POST", "/api/v1/offers", key, `{"name":"Shoes \ud83d\udc5f","destinationUrl":"https://shop.example/p","revenueCents":1,"payoutCents":1,"currency":"USD"}`))
		e.must(201, e.call("POST", apply, "", map[string]any{"name": "Zoë", "email": "zoe@example.com", "message": "Hello,\r\n\tI run a blog."}))
	})
}

func TestBodiesAreDecodedStrictly(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		_, key := e.brand()
		const rest = `"destinationUrl":"https://shop.example/p","payoutCents":1,"currency":"USD"`
		e.refuses(key, []badInput{
			{"a field name in another case", "/api/v1/offers", `{"NAME":"Shoes","revenueCents":1,` + rest + `}`, 422, "validation_error", "did you mean name"},
			{"a nested field name in another case", "/api/v1/offers", `{"name":"Shoes","revenueCents":1,"caps":{"Daily":5},` + rest + `}`, 422, "validation_error", "caps.Daily"},
			{"a field given twice", "/api/v1/offers", `{"name":"Shoes","name":"Boots","revenueCents":1,` + rest + `}`, 422, "validation_error", "more than once"},
			// Numbers that do not fit the field's type name its range.
			{"revenue beyond int64", "/api/v1/offers", `{"name":"Shoes","revenueCents":1e30,` + rest + `}`, 422, "validation_error", "revenueCents must be an integer from 0 to 1000000000000"},
			{"revenue beyond the range", "/api/v1/offers", `{"name":"Shoes","revenueCents":1000000000001,` + rest + `}`, 422, "validation_error", "revenueCents must be an integer from 0 to 1000000000000"},
			{"a fractional amount", "/api/v1/offers", `{"name":"Shoes","revenueCents":1.5,` + rest + `}`, 422, "validation_error", "revenueCents must be an integer from 0 to 1000000000000"},
			{"a cap beyond int64", "/api/v1/offers", `{"name":"Shoes","revenueCents":1,"caps":{"daily":99999999999999999999},` + rest + `}`, 422, "validation_error", "caps.daily must be an integer from 1 to 1000000000"},
			{"a cap beyond the range", "/api/v1/offers", `{"name":"Shoes","revenueCents":1,"caps":{"weekly":1000000001},` + rest + `}`, 422, "validation_error", "caps.weekly must be an integer from 1 to 1000000000"},
			{"hold hours beyond int", "/api/v1/offers", `{"name":"Shoes","revenueCents":1,"approval":"manual","holdHours":1e300,` + rest + `}`, 422, "validation_error", "holdHours must be an integer from 0 to 8784"},
			{"a payout beyond int64 on a conversion", "/api/v1/conversions", `{"offerId":"off_01jd0000000000000000000000","partnerId":"prt_01jd0000000000000000000000","payoutCents":-1e19}`, 422, "validation_error", "payoutCents must be an integer from 0 to 1000000000000"},
		})
		if got := e.listAll("/api/v1/offers", key); len(got) != 0 {
			t.Errorf("%d offers after refused requests, want none", len(got))
		}
	})
}

// TestDatesOutsideTheRangeAreRefused: a bound before 1970 once matched
// everything (identifiers carry Unix milliseconds), widening the list it
// was to narrow.
func TestDatesOutsideTheRangeAreRefused(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offerID := e.offer(key, nil)
		partnerID := e.activePartner(brandID, key)
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}))
		for _, path := range []string{
			"/api/v1/conversions?to=1969-12-31",
			"/api/v1/conversions?from=1969-12-31",
			"/api/v1/conversions?to=1970-01-01T00:59:59%2B01:00", // 1969 in UTC
			"/api/v1/conversions?from=0000-01-01",
			"/api/v1/deliveries?to=1969-12-31",
			"/api/v1/reports?to=1969-12-31",
			"/api/v1/reports?from=0000-01-01&to=0000-12-31",
		} {
			r := e.call("GET", path, key, nil)
			if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "1970-01-01") {
				t.Errorf("GET %s: %d %s, want 422 naming the range", path, r.status, r.body)
			}
		}
		// The edges of the range are fine.
		for _, path := range []string{"/api/v1/conversions?from=1970-01-01", "/api/v1/conversions?to=9999-12-31", "/api/v1/reports?from=1970-01-01&to=1970-01-31"} {
			e.must(200, e.call("GET", path, key, nil))
		}
		// from after to is a mistake on every list, as on reports, not an
		// empty list; one day (a date as both bounds) or one instant is fine.
		for _, list := range []string{"/api/v1/conversions", "/api/v1/clicks", "/api/v1/deliveries", "/api/v1/reports"} {
			r := e.call("GET", list+"?from=2026-11-30&to=2026-11-01", key, nil)
			if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "from must not be after to") {
				t.Errorf("GET %s with from after to: %d %s, want 422", list, r.status, r.body)
			}
			e.must(200, e.call("GET", list+"?from=2026-11-30&to=2026-11-30", key, nil))
		}
		e.must(200, e.call("GET", "/api/v1/conversions?from=2026-11-30T10:00:00Z&to=2026-11-30T10:00:00Z", key, nil))
		if r := e.call("GET", "/api/v1/conversions?from=2026-11-30T10:00:00.001Z&to=2026-11-30T10:00:00Z", key, nil); r.status != 422 {
			t.Errorf("from a millisecond after to: %d %s, want 422", r.status, r.body)
		}
	})
}

func TestBodiesAreDecodedStrictlyEvenWhenEscaped(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000})
	_, key := e.brand()
	const rest = `"destinationUrl":"https://shop.example/p","revenueCents":1,"payoutCents":1,"currency":"USD"`
	e.refuses(key, []badInput{
		{"a name given twice, once escaped", "/api/v1/offers", `{"name":"Shoes","\u006eame":"Boots",` + rest + `}`, 422, "validation_error", "more than once"},
		{"an escaped name in another case", "/api/v1/offers", `{"\u004eAME":"Shoes",` + rest + `}`, 422, "validation_error", "did you mean name"},
		{"a nested array of objects", "/api/public/webhooks", `{"url":"https://hooks.example.com/x","events":[{"x":1}]}`, 422, "validation_error", "events"},
		{"trailing data", "/api/v1/offers", `{"name":"Shoes",` + rest + `} {}`, 400, "invalid_json", "JSON"},
		{"whitespace only", "/api/v1/offers", " \n\t ", 400, "invalid_json", "empty"},
	})
	// An escaped name that is the field's name is the field.
	e.must(201, e.call("POST", "/api/v1/offers", key, `{"\u006eame":"Shoes",`+rest+`}`))
}
