package httpapi_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
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
