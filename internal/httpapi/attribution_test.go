package httpapi_test

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// click records a click on the offer through the partner's link and
// returns its id (the offer's destination must carry {click_id} as c=).
func (e *env) click(offerID, partnerID, query string) string {
	e.t.Helper()
	return clickIDOf(e.t, e.must(302, e.visit("/c/"+offerID+"?pid="+partnerID+query, map[string]string{"User-Agent": browserUA})))
}

func TestConversionsAttributedToClicks(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(testenv.Start())
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithClock(clock.Now))
		brandID, key := e.brand()
		offerID := e.offer(key, map[string]any{"destinationUrl": "https://shop.example/p?c={click_id}", "attributionWindowDays": 7})
		other := e.offer(key, clickDest)
		partnerID := e.activePartner(brandID, key)
		clickID := e.click(offerID, partnerID, "&sub1=newsletter&sub3=blue")

		var c tally.Conversion
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"clickId": clickID, "externalTxnId": "order-1"})).decode(t, &c)
		if c.ClickID != clickID || c.OfferID != offerID || c.PartnerID != partnerID || c.Sub1 != "newsletter" || c.Sub3 != "blue" || c.Sub2 != "" {
			t.Errorf("conversion %+v, want the click's offer, partner and subs", c)
		}
		// Naming the click's own offer is fine too; the same transaction replays.
		var again tally.Conversion
		e.must(200, e.call("POST", "/api/v1/conversions", key, map[string]any{"clickId": clickID, "offerId": offerID, "externalTxnId": "order-1"})).decode(t, &again)
		if again.ID != c.ID {
			t.Errorf("replay answered %s, want %s", again.ID, c.ID)
		}
		created := events[tally.ConversionEventData](t, e.svc, brandID, tally.EventConversionCreated)
		if len(created) != 1 || created[0].ClickID != clickID || created[0].Sub1 != "newsletter" {
			t.Errorf("conversion.created %+v, want one carrying the click id", created)
		}
		// The click names its conversion, read alone and in the list; a
		// second conversion of the click (another order) takes its place.
		var got tally.Click
		e.must(200, e.call("GET", "/api/v1/clicks/"+clickID, key, nil)).decode(t, &got)
		if got.ConversionID != c.ID {
			t.Errorf("the click names conversion %q, want %s", got.ConversionID, c.ID)
		}
		var second tally.Conversion
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"clickId": clickID, "externalTxnId": "order-2"})).decode(t, &second)
		var list struct{ Data []tally.Click }
		e.must(200, e.call("GET", "/api/v1/clicks?partnerId="+partnerID, key, nil)).decode(t, &list)
		if len(list.Data) != 1 || list.Data[0].ConversionID != second.ID {
			t.Errorf("clicks %+v, want the one click naming the latest conversion %s", list.Data, second.ID)
		}
		var unconverted tally.Click
		e.must(200, e.call("GET", "/api/v1/clicks/"+e.click(offerID, partnerID, ""), key, nil)).decode(t, &unconverted)
		if unconverted.ConversionID != "" {
			t.Errorf("a click without a conversion names %q", unconverted.ConversionID)
		}

		otherBrand, otherKey := e.brand()
		otherOffer := e.offer(otherKey, clickDest)
		otherClick := e.click(otherOffer, e.activePartner(otherBrand, otherKey), "")
		for _, c := range []struct {
			body map[string]any
			want string
		}{
			{map[string]any{"clickId": clickID, "offerId": other}, "is not the offer of click"},
			{map[string]any{"clickId": clickID, "partnerId": partnerID}, "either partnerId or clickId"},
			{map[string]any{"clickId": "", "offerId": offerID, "partnerId": partnerID}, "clickId is empty"}, // not "both"
			{map[string]any{"clickId": clickID, "sub1": "x"}, "sub1 comes from the click"},
			{map[string]any{"clickId": "clk_nope"}, "does not match a recorded click"},
			{map[string]any{"clickId": otherClick}, "does not match a recorded click"}, // another brand's
			{map[string]any{"offerId": offerID}, "partnerId is required"},
		} {
			r := e.call("POST", "/api/v1/conversions", key, c.body)
			if r.status != 422 || !strings.Contains(string(r.body), c.want) {
				t.Errorf("POST %v: %d %s, want 422 saying %q", c.body, r.status, r.body, c.want)
			}
		}

		// Seven days and a moment later the click is past the window.
		clock.Advance(7*24*time.Hour - time.Second)
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"clickId": clickID}))
		clock.Advance(2 * time.Second)
		if r := e.call("POST", "/api/v1/conversions", key, map[string]any{"clickId": clickID}); r.status != 422 || !strings.Contains(string(r.body), "attribution window of 7 days") {
			t.Errorf("a conversion after the window: %d %s", r.status, r.body)
		}
		if got := e.listAll("/api/v1/conversions", key); len(got) != 3 {
			t.Errorf("%d conversions stored, want 3", len(got))
		}
	})
}

func TestClickConversionsWithOneTransactionRace(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		clickID := e.click(offerID, e.activePartner(brandID, key), "")
		answers, statuses := e.raceCalls(30, "POST", "/api/v1/conversions", key, func(int) any {
			return map[string]any{"clickId": clickID, "externalTxnId": "order-77"}
		})
		ids := map[string]bool{}
		for _, a := range answers {
			ids[a.field(t, "id")] = true
		}
		if statuses[201] != 1 || statuses[200] != 29 || len(ids) != 1 {
			t.Errorf("statuses %v, %d distinct conversions; want one 201, 29 200s, one conversion", statuses, len(ids))
		}
		if n := eventCount(t, e.svc, brandID, tally.EventConversionCreated); n != 1 {
			t.Errorf("%d conversion.created events, want 1", n)
		}
	})
}

func TestUpdateOffer(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offerID := e.offer(key, map[string]any{"destinationUrl": "https://shop.example/p?c={click_id}", "caps": map[string]any{"daily": 3, "monthly": 100}})
		partnerID := e.activePartner(brandID, key)
		path := "/api/v1/offers/" + offerID

		var o tally.Offer
		e.must(200, e.call("PATCH", path, key, map[string]any{"name": "  Boots  ", "payoutCents": 450, "destinationUrl": "https://boots.example/?click={click_id}",
			"approval": "manual", "holdHours": 24, "attributionWindowDays": 45, "caps": map[string]any{"monthly": nil, "weekly": 10}})).decode(t, &o)
		if o.Name != "Boots" || o.PayoutCents != 450 || o.RevenueCents != 1000 || o.Approval != "manual" || o.HoldHours != 24 || o.AttributionWindowDays != 45 ||
			o.Caps.Daily == nil || *o.Caps.Daily != 3 || o.Caps.Monthly != nil || o.Caps.Weekly == nil || *o.Caps.Weekly != 10 || !o.UpdatedAt.After(o.CreatedAt.Time) {
			t.Errorf("patched offer %+v", o)
		}
		var got tally.Offer
		e.must(200, e.call("GET", path, key, nil)).decode(t, &got)
		if got.Name != o.Name || got.PayoutCents != 450 || got.DestinationURL != o.DestinationURL {
			t.Errorf("read back %+v", got)
		}
		if loc := e.must(302, e.visit("/c/"+offerID+"?pid="+partnerID, nil)).header.Get("Location"); !strings.HasPrefix(loc, "https://boots.example/?click=clk_") {
			t.Errorf("the link goes to %s after the destination changed", loc)
		}
		for _, bad := range []map[string]any{
			{"currency": "EUR"},
			{"approval": "auto"}, // holdHours 24 needs manual
			{"holdHours": -1},
			{"name": ""},
			{"destinationUrl": "ftp://x"},
			{"status": "archived"},
			{"caps": map[string]any{"hourly": 5}},
			{"caps": map[string]any{"daily": 0}},
			{"attributionWindowDays": 0},
			{"attributionWindowDays": 366},
			{"payoutCents": -1},
			{"color": "red"},
		} {
			if r := e.call("PATCH", path, key, bad); r.status != 422 || r.errorCode() != "validation_error" {
				t.Errorf("PATCH %v: %d %s, want 422", bad, r.status, r.body)
			}
		}
		_, otherKey := e.brand()
		e.must(404, e.call("PATCH", path, otherKey, map[string]any{"name": "Mine"}))
		e.must(404, e.call("PATCH", "/api/v1/offers/off_nope", key, map[string]any{"name": "Mine"}))
		e.must(200, e.call("PATCH", path, key, map[string]any{})) // nothing to change

		// The cap changes mid-day: the day's count so far holds.
		e.must(200, e.call("PATCH", path, key, map[string]any{"approval": "auto", "holdHours": 0}))
		for i := range 2 {
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": fmt.Sprint("a", i)}))
		}
		e.must(200, e.call("PATCH", path, key, map[string]any{"caps": map[string]any{"daily": 2}}))
		if r := e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}); r.errorCode() != "cap_reached" {
			t.Errorf("over the lowered cap: %d %s", r.status, r.body)
		}
		e.must(200, e.call("PATCH", path, key, map[string]any{"caps": map[string]any{"daily": 4}}))
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}))
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}))
		if r := e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}); r.errorCode() != "cap_reached" {
			t.Errorf("over the raised cap: %d %s", r.status, r.body)
		}
		reached := events[tally.CapReachedEventData](t, e.svc, brandID, tally.EventCapReached)
		if len(reached) != 1 || reached[0].Limit != 4 || reached[0].Cap != "daily" {
			t.Errorf("cap.reached %+v, want one, at the raised cap of 4", reached)
		}

		// Paused: the link answers 404 and conversions 422; active again, both work.
		e.must(200, e.call("PATCH", path, key, map[string]any{"status": "paused", "caps": map[string]any{"daily": nil}}))
		e.must(404, e.visit("/c/"+offerID+"?pid="+partnerID, nil))
		e.must(422, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}))
		e.must(200, e.call("PATCH", path, key, map[string]any{"status": "active"}))
		e.must(302, e.visit("/c/"+offerID+"?pid="+partnerID, nil))
	})
}

// An instance that cached an offer follows a change another instance made
// at once: the offer's revision is part of every write that relies on it.
func TestOfferChangeReachesOtherInstancesAtOnce(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		a := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		b := &env{t: t, svc: servicetest.New(st)}
		b.srv = httptest.NewServer(httpapi.New(b.svc.API(), httpapi.Config{RateLimit: 10_000, Logger: slog.New(slog.DiscardHandler)}).Handler())
		t.Cleanup(b.srv.Close)
		brandID, key := a.brand()
		offerID := a.offer(key, clickDest)
		partnerID := a.activePartner(brandID, key)
		post := func(e *env) tally.Conversion {
			var c tally.Conversion
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID})).decode(t, &c)
			return c
		}
		if c := post(a); c.PayoutCents != 300 { // a has the offer cached now
			t.Fatalf("payout %d", c.PayoutCents)
		}
		b.must(200, b.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"payoutCents": 999, "destinationUrl": "https://new.example/?c={click_id}"}))
		if c := post(a); c.PayoutCents != 999 {
			t.Errorf("instance a recorded payout %d after b changed it to 999", c.PayoutCents)
		}
		if loc := a.must(302, a.visit("/c/"+offerID+"?pid="+partnerID, nil)).header.Get("Location"); !strings.HasPrefix(loc, "https://new.example/") {
			t.Errorf("instance a redirects to %s after b changed the destination", loc)
		}
		b.must(200, b.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"status": "paused"}))
		a.must(404, a.visit("/c/"+offerID+"?pid="+partnerID, nil))
		a.must(422, a.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}))
	})
}

func TestInboundPostback(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		jpy := e.offer(key, map[string]any{"destinationUrl": "https://shop.example/p?c={click_id}", "currency": "JPY"})
		partnerID := e.activePartner(brandID, key)
		clickID := e.click(offerID, partnerID, "&sub1=email")

		e.must(404, e.call("GET", "/api/v1/postback-token", key, nil))
		var tok identity.CreatedPostbackToken
		e.must(201, e.call("POST", "/api/v1/postback-token", key, nil)).decode(t, &tok)
		if !strings.HasPrefix(tok.Token, "tally_pb_") || !strings.HasPrefix(tok.Token, tok.Prefix) || !strings.HasPrefix(tok.ID, "pbt_") {
			t.Fatalf("token %+v", tok)
		}
		shown := e.must(200, e.call("GET", "/api/v1/postback-token", key, nil))
		if strings.Contains(string(shown.body), tok.Token) || shown.field(t, "id") != tok.ID {
			t.Errorf("GET postback-token: %s", shown.body)
		}

		pb := func(q url.Values) response {
			t.Helper()
			return e.call("GET", "/postback?"+q.Encode(), "", nil)
		}
		q := url.Values{"click_id": {clickID}, "txn_id": {"A-1001"}, "amount": {"49.90"}, "token": {tok.Token}}
		r := e.must(201, pb(q))
		var ans struct {
			ConversionID, Status string
			Duplicate            bool
		}
		r.decode(t, &ans)
		var c tally.Conversion
		e.must(200, e.call("GET", "/api/v1/conversions/"+ans.ConversionID, key, nil)).decode(t, &c)
		if c.ClickID != clickID || c.RevenueCents != 4990 || c.PayoutCents != 300 || c.Currency != "USD" || c.ExternalTxnID != "A-1001" ||
			c.Sub1 != "email" || ans.Status != "approved" || ans.Duplicate {
			t.Errorf("postback answer %+v, conversion %+v", ans, c)
		}
		r.decode(t, &ans)
		e.must(200, pb(q)).decode(t, &ans)
		if ans.ConversionID != c.ID || !ans.Duplicate {
			t.Errorf("the same postback again: %+v", ans)
		}
		if n := eventCount(t, e.svc, brandID, tally.EventConversionCreated); n != 1 {
			t.Errorf("%d conversion.created, want 1", n)
		}
		jpyClick := e.click(jpy, partnerID, "")
		var yen tally.Conversion
		e.must(201, pb(url.Values{"click_id": {jpyClick}, "amount": {"1500"}, "token": {tok.Token}})).decode(t, &ans)
		e.must(200, e.call("GET", "/api/v1/conversions/"+ans.ConversionID, key, nil)).decode(t, &yen)
		if yen.RevenueCents != 1500 || yen.Currency != "JPY" || yen.ExternalTxnID != jpyClick {
			t.Errorf("a yen postback: %+v", yen)
		}
		// Without txn_id, the click is the transaction (as Everflow and TUNE
		// count one conversion per click then): an advertiser's system that
		// fires the postback again, say after a timeout, records nothing new.
		var again struct {
			ConversionID string
			Duplicate    bool
		}
		e.must(200, pb(url.Values{"click_id": {jpyClick}, "amount": {"1500"}, "token": {tok.Token}})).decode(t, &again)
		if again.ConversionID != yen.ID || !again.Duplicate {
			t.Errorf("the same postback without txn_id again: %+v, want a replay of %s", again, yen.ID)
		}

		for _, c := range []struct {
			q      url.Values
			status int
			code   string
		}{
			{url.Values{"click_id": {clickID}}, 401, "unauthorized"},
			{url.Values{"click_id": {clickID}, "token": {"tally_pb_" + strings.Repeat("0", 48)}}, 401, "unauthorized"},
			{url.Values{"click_id": {clickID}, "token": {key}}, 401, "unauthorized"}, // an API key is not a postback token
			{url.Values{"token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {"clk_nope"}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {clickID}, "amount": {"12.345"}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {clickID}, "amount": {"-5"}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {jpyClick}, "amount": {"15.5"}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {clickID}, "currency": {"usd"}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {clickID}, "payout": {"5"}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {clickID, clickID}, "token": {tok.Token}}, 422, "validation_error"},
			{url.Values{"click_id": {clickID}, "txn_id": {"\r\n"}, "token": {tok.Token}}, 422, "validation_error"},
		} {
			if r := pb(c.q); r.status != c.status || r.errorCode() != c.code {
				t.Errorf("postback %v: %d %s, want %d %s", c.q, r.status, r.body, c.status, c.code)
			}
		}
		// Messages name the parameters the advertiser sent, not the API's
		// body fields (clickId, externalTxnId).
		for q, want := range map[string]string{
			"click_id=clk_nope":                                    `click_id \"clk_nope\" does not match a recorded click.`,
			"click_id=clk_nope&amount=1":                           `click_id \"clk_nope\" does not match a recorded click.`,
			"click_id=clk_%0D" + strings.Repeat("x", 300):          `does not match a recorded click.`,
			"click_id=" + clickID + "&txn_id=%0D%0A":               "txn_id must not contain",
			"click_id=" + clickID + "&amount=99999999999999999999": "amount is too large",
			"click_id=" + clickID + "&amount=10000000000.01":       "amount is too large",
			"click_id=" + clickID + "&amount=1e5":                  "amount must be a decimal number",
		} {
			r := e.call("GET", "/postback?"+q+"&token="+tok.Token, "", nil)
			if body := string(r.body); r.status != 422 || !strings.Contains(body, want) || strings.Contains(body, "clickId") || strings.Contains(body, "externalTxnId") {
				t.Errorf("postback %s: %d %s, want 422 saying %s", q, r.status, body, want)
			}
		}
		// HEAD (link checkers, prefetchers) records nothing, as on the tracking link.
		head := e.call("HEAD", "/postback?"+url.Values{"click_id": {clickID}, "txn_id": {"A-HEAD"}, "token": {tok.Token}}.Encode(), "", nil)
		if head.status != 405 || head.header.Get("Allow") != "GET" {
			t.Errorf("HEAD /postback: %d %v, want 405 with Allow: GET", head.status, head.header)
		}
		if got := e.listAll("/api/v1/conversions", key); len(got) != 2 {
			t.Errorf("%d conversions after refused postbacks, want the 2 recorded", len(got))
		}

		// Another brand's click is not this token's to convert.
		otherBrand, otherKey := e.brand()
		otherClick := e.click(e.offer(otherKey, clickDest), e.activePartner(otherBrand, otherKey), "")
		e.must(422, pb(url.Values{"click_id": {otherClick}, "token": {tok.Token}}))

		// Rotation: the old token stops working, the new one works.
		var rotated identity.CreatedPostbackToken
		e.must(201, e.call("POST", "/api/v1/postback-token", key, nil)).decode(t, &rotated)
		e.must(401, pb(url.Values{"click_id": {clickID}, "txn_id": {"A-1002"}, "token": {tok.Token}}))
		e.must(201, pb(url.Values{"click_id": {clickID}, "txn_id": {"A-1002"}, "token": {rotated.Token}}))
		e.must(200, e.call("DELETE", "/api/v1/postback-token", key, nil))
		e.must(401, pb(url.Values{"click_id": {clickID}, "txn_id": {"A-1003"}, "token": {rotated.Token}}))
		e.must(404, e.call("DELETE", "/api/v1/postback-token", key, nil))
	})
}

// Postbacks are rate-limited per token, like API requests per key.
func TestInboundPostbackRateLimit(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 3}, service.WithClock(testenv.MidMinute().Now))
	brandID, key := e.brand()
	offerID := e.offer(key, clickDest)
	partnerID := e.activePartner(brandID, key)
	clickID := e.click(offerID, partnerID, "")
	var tok identity.CreatedPostbackToken
	e.must(201, e.call("POST", "/api/v1/postback-token", key, nil)).decode(t, &tok)
	for i := range 4 {
		r := e.call("GET", "/postback?click_id="+clickID+"&txn_id=T"+fmt.Sprint(i)+"&token="+tok.Token, "", nil)
		if want := map[bool]int{true: 429, false: 201}[i == 3]; r.status != want {
			t.Errorf("postback %d: %d %s, want %d", i+1, r.status, r.body, want)
		}
		if i == 3 && r.header.Get("Retry-After") == "" {
			t.Error("429 without Retry-After")
		}
	}
	// Guessing tokens counts against the client address, as guessing keys does.
	for i := range 4 {
		r := e.call("GET", "/postback?click_id="+clickID+"&token=tally_pb_"+strings.Repeat(fmt.Sprint(i), 48), "", nil)
		if want := map[bool]int{true: 429, false: 401}[i == 3]; r.status != want || r.header.Get("X-RateLimit-Limit") != "3" {
			t.Errorf("bad token %d: %d %v %s, want %d with rate-limit headers", i+1, r.status, r.header, r.body, want)
		}
	}
}
