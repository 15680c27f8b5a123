package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// convert records a conversion and returns it.
func (e *env) convert(key string, body map[string]any) tally.Conversion {
	e.t.Helper()
	var c tally.Conversion
	e.must(201, e.call("POST", "/api/v1/conversions", key, body)).decode(e.t, &c)
	return c
}

// report is the brand's report of all time, one row per currency.
func (e *env) report(key, query string) []tally.ReportRow {
	e.t.Helper()
	var r struct{ Data []tally.ReportRow }
	e.must(200, e.call("GET", "/api/v1/reports?"+query, key, nil)).decode(e.t, &r)
	return r.Data
}

func TestReversingARefundTakesItOutOfReportsAndTellsThePartner(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		pb := newGetReceiver(t, func(int) int { return 204 })
		e.must(200, e.call("PUT", "/api/v1/partners/"+partner+"/postback", key, map[string]any{
			"url": pb.srv.URL + "/pb?status={status}&cnv={conversion_id}&event={event}", "events": []string{"conversion.reversed"}}))

		c := e.convert(key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": "order-1"})
		path := "/api/v1/conversions/" + c.ID + "/reverse"
		for _, body := range []any{nil, map[string]any{}, map[string]any{"reason": "returned"}, map[string]any{"reason": "refund", "note": strings.Repeat("x", 1001)},
			map[string]any{"reason": "refund", "extra": 1}} {
			r := e.call("POST", path, key, body)
			if r.status != 422 && r.status != 400 {
				t.Errorf("reverse with %v: %d %s, want 422", body, r.status, r.body)
			}
		}
		if got := e.must(200, e.call("GET", "/api/v1/conversions/"+c.ID, key, nil)).field(t, "status"); got != "approved" {
			t.Fatalf("after refused reversals the conversion is %s", got)
		}
		_, otherKey := e.brand()
		e.must(404, e.call("POST", path, otherKey, map[string]any{"reason": "refund"}))

		var reversed tally.Conversion
		e.must(200, e.call("POST", path, key, map[string]any{"reason": "refund", "note": "returned"})).decode(t, &reversed)
		if reversed.Status != tally.ConversionReversed || reversed.ReversalReason != "refund" || reversed.ReversalNote != "returned" || reversed.ReversedAt == nil {
			t.Errorf("reversed conversion = %+v", reversed)
		}
		if r := e.call("POST", path, key, map[string]any{"reason": "refund"}); r.status != 409 || r.errorCode() != "invalid_transition" {
			t.Errorf("second reversal: %d %s, want 409 invalid_transition", r.status, r.body)
		}
		manual := e.offer(key, map[string]any{"approval": "manual"})
		pending := e.convert(key, map[string]any{"offerId": manual, "partnerId": partner})
		if r := e.call("POST", "/api/v1/conversions/"+pending.ID+"/reverse", key, map[string]any{"reason": "chargeback"}); r.status != 409 || r.errorCode() != "invalid_transition" {
			t.Errorf("reversing a pending conversion: %d %s, want 409 invalid_transition", r.status, r.body)
		}

		rows := e.report(key, "")
		if len(rows) != 1 || rows[0].Conversions != 2 || rows[0].Approved != 0 || rows[0].Pending != 1 || rows[0].Reversed != 1 || rows[0].PayoutCents != 300 || rows[0].RevenueCents != 1000 {
			t.Errorf("report = %+v, want 2 conversions, 1 pending, 1 reversed, only the pending one's money", rows)
		}
		if ids := e.listAll("/api/v1/conversions?status=reversed", key); len(ids) != 1 || ids[0] != c.ID {
			t.Errorf("status=reversed lists %v", ids)
		}
		if n := eventCount(t, e.svc, brandID, tally.EventConversionReversed); n != 1 {
			t.Errorf("%d conversion.reversed events, want 1", n)
		}
		e.waitFor(key, "type=postback", "the reversal's postback", attemptsMade(1))
		if got := pb.requests(); len(got) != 1 || got[0].URL.Query().Get("status") != "reversed" || got[0].URL.Query().Get("cnv") != c.ID || got[0].URL.Query().Get("event") != "conversion.reversed" {
			t.Errorf("postbacks = %v", got)
		}
	})
}

func TestReactivatedPartnerStartsTheAutoBanWindowAgain(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, behindProxy())
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		partnerID := e.activePartner(brandID, key)
		e.must(200, e.call("PUT", "/api/v1/fraud/settings", key, map[string]any{"threshold": 70,
			"autoBan": map[string]any{"enabled": true, "highRiskClicks": 3, "windowHours": 24}}))
		link := "/c/" + offerID + "?pid=" + partnerID
		bot := func(ip string) response { return e.clickFrom(link, ip, "python-requests/2.31") }
		path := "/api/v1/partners/" + partnerID + "/reactivate"

		if r := e.call("POST", path, key, nil); r.status != 409 || r.errorCode() != "invalid_transition" {
			t.Errorf("reactivating an active partner: %d %s, want 409 invalid_transition", r.status, r.body)
		}
		for i := range 3 {
			e.must(302, bot(fmt.Sprintf("192.0.2.%d", i+1)))
		}
		e.must(404, bot("192.0.2.9")) // banned by the rule
		_, otherKey := e.brand()
		e.must(404, e.call("POST", path, otherKey, nil))

		var p tally.Partner
		e.must(200, e.call("POST", path, key, nil)).decode(t, &p)
		if p.Status != tally.PartnerActive {
			t.Fatalf("reactivated partner = %+v", p)
		}
		// The window starts again: two high-risk clicks do not ban, the third does.
		e.must(302, bot("192.0.2.10"))
		e.must(302, bot("192.0.2.11"))
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID}))
		e.must(302, bot("192.0.2.12"))
		e.must(404, bot("192.0.2.13"))
		if bans := events[tally.PartnerEventData](t, e.svc, brandID, tally.EventPartnerBanned); len(bans) != 2 {
			t.Errorf("%d partner.banned events, want 2", len(bans))
		}
		got := events[tally.PartnerEventData](t, e.svc, brandID, tally.EventPartnerReactivated)
		if len(got) != 1 || got[0].PreviousStatus != tally.PartnerBanned || got[0].Status != tally.PartnerActive {
			t.Errorf("partner.reactivated events = %+v", got)
		}

		// A rejected application can be reinstated too.
		applied := e.must(201, e.call("POST", "/api/public/brands/"+brandID+"/applications", "", map[string]any{"name": "Late", "email": "late@example.com"})).field(t, "id")
		if r := e.call("POST", "/api/v1/partners/"+applied+"/reactivate", key, nil); r.status != 409 {
			t.Errorf("reactivating an applied partner: %d, want 409", r.status)
		}
		e.must(200, e.call("POST", "/api/v1/partners/"+applied+"/reject", key, nil))
		e.must(200, e.call("POST", "/api/v1/partners/"+applied+"/reactivate", key, nil))
	})
}

func TestPayoutTermsFixTheAmountWhenAConversionIsRecorded(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		alice, bob := e.activePartner(brandID, key), e.activePartner(brandID, key)
		base := map[string]any{"name": "Boots", "destinationUrl": "https://shop.example/p?c={click_id}", "revenueCents": 1000, "currency": "USD"}
		with := func(extra map[string]any) map[string]any {
			m := map[string]any{}
			for _, src := range []map[string]any{base, extra} {
				for k, v := range src {
					m[k] = v
				}
			}
			return m
		}
		for _, bad := range []map[string]any{
			{"payoutCents": 300, "payoutPercent": 10},
			{"payoutPercent": 12.555},
			{"payoutPercent": 100.01},
			{"payoutPercent": 0},
			{"payoutPercent": -5},
			{"payoutPercent": 1e3},
			{},
		} {
			r := e.call("POST", "/api/v1/offers", key, with(bad))
			if r.status != 422 || !strings.Contains(string(r.body), "payout") {
				t.Errorf("offer with %v: %d %s, want 422 naming the payout", bad, r.status, r.body)
			}
		}
		if ids := e.listAll("/api/v1/offers", key); len(ids) != 0 {
			t.Fatalf("refused offers were stored: %v", ids)
		}

		var o tally.Offer
		e.must(201, e.call("POST", "/api/v1/offers", key, with(map[string]any{"payoutPercent": 12.5}))).decode(t, &o)
		if o.PayoutPercent == nil || *o.PayoutPercent != 1250 || o.PayoutCents != 0 {
			t.Fatalf("offer = %+v, want 12.5%%", o)
		}
		payout := func(body map[string]any) int64 {
			t.Helper()
			body["offerId"] = o.ID
			return e.convert(key, body).PayoutCents
		}
		// 12.5% of 1001 is 125.125, of 1004 125.5: half up to the cent.
		if got := payout(map[string]any{"partnerId": alice, "revenueCents": 1001}); got != 125 {
			t.Errorf("12.5%% of 1001 = %d, want 125", got)
		}
		if got := payout(map[string]any{"partnerId": alice, "revenueCents": 1004}); got != 126 {
			t.Errorf("12.5%% of 1004 = %d, want 126", got)
		}
		if got := payout(map[string]any{"partnerId": alice, "revenueCents": 1004, "payoutCents": 7}); got != 7 {
			t.Errorf("a posted payoutCents gave %d, want 7", got)
		}

		// Bob's own terms.
		terms := "/api/v1/offers/" + o.ID + "/partners/" + bob + "/terms"
		e.must(404, e.call("GET", terms, key, nil))
		otherBrand, otherBrandKey := e.brand()
		foreign := e.activePartner(otherBrand, otherBrandKey)
		for _, bad := range []struct {
			path string
			body any
			want int
		}{
			{terms, map[string]any{"payoutCents": 100, "payoutPercent": 5}, 422},
			{terms, map[string]any{"payoutPercent": 101}, 422},
			{terms, map[string]any{"payoutPercent": 1.234}, 422},
			{terms, map[string]any{}, 422},
			{terms, map[string]any{"payoutCents": -1}, 422},
			{"/api/v1/offers/" + o.ID + "/partners/" + foreign + "/terms", map[string]any{"payoutCents": 100}, 404},
		} {
			if r := e.call("PUT", bad.path, key, bad.body); r.status != bad.want {
				t.Errorf("PUT %s %v: %d %s, want %d", bad.path, bad.body, r.status, r.body, bad.want)
			}
		}
		e.must(404, e.call("PUT", terms, otherBrandKey, map[string]any{"payoutCents": 100}))
		e.must(404, e.call("GET", terms, key, nil))

		var got tally.PayoutTerms
		e.must(200, e.call("PUT", terms, key, map[string]any{"payoutPercent": 20})).decode(t, &got)
		if got.PayoutPercent == nil || *got.PayoutPercent != 2000 || got.PayoutCents != nil || got.PartnerID != bob || got.OfferID != o.ID {
			t.Errorf("PUT terms = %+v", got)
		}
		e.must(200, e.call("GET", terms, key, nil))
		before := e.convert(key, map[string]any{"offerId": o.ID, "partnerId": bob, "revenueCents": 999})
		if before.PayoutCents != 200 { // 199.8
			t.Errorf("bob's 20%% of 999 = %d, want 200", before.PayoutCents)
		}
		if got := payout(map[string]any{"partnerId": alice, "revenueCents": 999}); got != 125 { // 124.875
			t.Errorf("alice's 12.5%% of 999 = %d, want 125", got)
		}
		// A click-based conversion and a GET postback pay bob's terms too.
		clickID := e.click(o.ID, bob, "")
		if c := e.convert(key, map[string]any{"clickId": clickID, "revenueCents": 500}); c.PayoutCents != 100 {
			t.Errorf("click-based conversion paid %d, want 100", c.PayoutCents)
		}
		var tok struct{ Token string }
		e.must(201, e.call("POST", "/api/v1/postback-token", key, nil)).decode(t, &tok)
		var ans struct{ ConversionID string }
		e.must(201, e.call("GET", "/postback?click_id="+e.click(o.ID, bob, "")+"&amount=25.00&token="+tok.Token, "", nil)).decode(t, &ans)
		var pc tally.Conversion
		e.must(200, e.call("GET", "/api/v1/conversions/"+ans.ConversionID, key, nil)).decode(t, &pc)
		if pc.PayoutCents != 500 {
			t.Errorf("GET postback paid %d, want 20%% of 2500 = 500", pc.PayoutCents)
		}

		// Fixed terms, then none: recorded conversions keep their payout.
		e.must(200, e.call("PUT", terms, key, map[string]any{"payoutCents": 450}))
		if got := payout(map[string]any{"partnerId": bob}); got != 450 {
			t.Errorf("bob's fixed terms paid %d, want 450", got)
		}
		e.must(200, e.call("DELETE", terms, key, nil))
		e.must(404, e.call("DELETE", terms, key, nil))
		e.must(404, e.call("GET", terms, key, nil))
		if got := payout(map[string]any{"partnerId": bob, "revenueCents": 1000}); got != 125 {
			t.Errorf("without terms bob earns %d, want the offer's 125", got)
		}
		var kept tally.Conversion
		e.must(200, e.call("GET", "/api/v1/conversions/"+before.ID, key, nil)).decode(t, &kept)
		if kept.PayoutCents != 200 {
			t.Errorf("a recorded conversion's payout changed to %d", kept.PayoutCents)
		}

		// PATCH switches between a fixed payout and a percentage.
		if r := e.call("PATCH", "/api/v1/offers/"+o.ID, key, map[string]any{"payoutCents": 1, "payoutPercent": 1}); r.status != 422 {
			t.Errorf("PATCH with both: %d %s", r.status, r.body)
		}
		if r := e.call("PATCH", "/api/v1/offers/"+o.ID, key, map[string]any{"payoutPercent": 100.5}); r.status != 422 {
			t.Errorf("PATCH 100.5%%: %d %s", r.status, r.body)
		}
		e.must(200, e.call("PATCH", "/api/v1/offers/"+o.ID, key, map[string]any{"payoutCents": 250})).decode(t, &o)
		if o.PayoutPercent != nil || o.PayoutCents != 250 {
			t.Errorf("after PATCH payoutCents: %+v", o)
		}
		e.must(200, e.call("PATCH", "/api/v1/offers/"+o.ID, key, map[string]any{"payoutPercent": 7.25})).decode(t, &o)
		if o.PayoutPercent == nil || *o.PayoutPercent != 725 || o.PayoutCents != 0 {
			t.Errorf("after PATCH payoutPercent: %+v", o)
		}
		e.must(200, e.call("PATCH", "/api/v1/offers/"+o.ID, key, map[string]any{"name": "Boots 2"})).decode(t, &o)
		if o.PayoutPercent == nil || *o.PayoutPercent != 725 {
			t.Errorf("a PATCH of the name lost the percentage: %+v", o)
		}
	})
}
