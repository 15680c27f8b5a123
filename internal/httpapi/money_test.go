package httpapi_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
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

// balance is a partner's balance in currency (zero when it has none).
func (e *env) balance(key, partnerID, currency string) tally.Balance {
	e.t.Helper()
	var b struct{ Data []tally.Balance }
	e.must(200, e.call("GET", "/api/v1/partners/"+partnerID+"/balance", key, nil)).decode(e.t, &b)
	for _, x := range b.Data {
		if x.Currency == currency {
			return x
		}
	}
	return tally.Balance{Currency: currency}
}

// booksBalance checks, for each partner, that owed + inPayout + paid is
// the sum of its approved conversions' payouts in currency, and pending
// that of its pending ones.
func (e *env) booksBalance(key, currency string, partnerIDs ...string) {
	e.t.Helper()
	for _, id := range partnerIDs {
		var approved, pending int64
		for _, status := range []string{"approved", "pending"} {
			cursor := ""
			for {
				var page struct {
					Data       []tally.Conversion
					NextCursor *string
				}
				e.must(200, e.call("GET", "/api/v1/conversions?limit=100&partnerId="+id+"&status="+status+cursor, key, nil)).decode(e.t, &page)
				for _, c := range page.Data {
					if c.Currency != currency {
						continue
					}
					if status == "approved" {
						approved += c.PayoutCents
					} else {
						pending += c.PayoutCents
					}
				}
				if page.NextCursor == nil {
					break
				}
				cursor = "&cursor=" + *page.NextCursor
			}
		}
		b := e.balance(key, id, currency)
		if b.OwedCents+b.InPayoutCents+b.PaidCents != approved || b.PendingCents != pending {
			e.t.Errorf("partner %s: balance %+v, but its approved conversions pay %d and its pending %d", id, b, approved, pending)
		}
	}
}

func TestAMonthsClose(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(testenv.Start())
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithClock(clock.Now))
		brandID, key := e.brand()
		alice, bob := e.activePartner(brandID, key), e.activePartner(brandID, key)
		usd, eur := e.offer(key, nil), e.offer(key, map[string]any{"currency": "EUR", "payoutCents": 500})
		manual := e.offer(key, map[string]any{"approval": "manual"})
		conv := func(offer, partner string) tally.Conversion {
			return e.convert(key, map[string]any{"offerId": offer, "partnerId": partner})
		}
		a1, a2, _ := conv(usd, alice), conv(usd, alice), conv(usd, alice)
		conv(usd, bob)
		conv(eur, alice)
		conv(manual, alice)
		if b := e.balance(key, alice, "USD"); b != (tally.Balance{Currency: "USD", PendingCents: 300, OwedCents: 900}) {
			t.Errorf("alice's USD balance = %+v", b)
		}
		if b := e.balance(key, alice, "EUR"); b.OwedCents != 500 {
			t.Errorf("alice's EUR balance = %+v", b)
		}
		_, otherKey := e.brand()
		e.must(404, e.call("GET", "/api/v1/partners/"+alice+"/balance", otherKey, nil))

		today := clock.Now().UTC().Format(time.DateOnly)
		tomorrow := clock.Now().UTC().AddDate(0, 0, 1).Format(time.DateOnly)
		for _, bad := range []struct {
			body  map[string]any
			field string
		}{
			{map[string]any{}, "currency"},
			{map[string]any{"currency": "usd"}, "currency"},
			{map[string]any{"currency": "GBP"}, "currency"},
			{map[string]any{"currency": "USD", "through": "2026-13-01"}, "through"},
			{map[string]any{"currency": "USD", "through": tomorrow}, "through"},
			{map[string]any{"currency": "USD", "partnerIds": []string{"bob"}}, "partnerIds"},
			{map[string]any{"currency": "USD", "partnerIds": []string{}}, "partnerIds"},
			{map[string]any{"currency": "USD", "through": "2000-01-01"}, "currency"},
		} {
			r := e.call("POST", "/api/v1/payouts", key, bad.body)
			if r.status != 422 || !strings.Contains(string(r.body), bad.field) {
				t.Errorf("POST /payouts %v: %d %s, want 422 naming %s", bad.body, r.status, r.body, bad.field)
			}
		}
		if ids := e.listAll("/api/v1/payouts", key); len(ids) != 0 {
			t.Fatalf("refused payouts were stored: %v", ids)
		}

		// A refund before the close leaves alice 600 owed: her three
		// conversions less the refund.
		e.must(200, e.call("POST", "/api/v1/conversions/"+a1.ID+"/reverse", key, map[string]any{"reason": "refund"}))
		var p tally.Payout
		e.must(201, e.call("POST", "/api/v1/payouts", key, map[string]any{"currency": "USD", "through": today})).decode(t, &p)
		want := []tally.PayoutLine{{PartnerID: alice, AmountCents: 600, Conversions: 3}, {PartnerID: bob, AmountCents: 300, Conversions: 1}}
		slices.SortFunc(want, func(a, b tally.PayoutLine) int { return strings.Compare(a.PartnerID, b.PartnerID) })
		if p.Status != tally.PayoutPending || p.TotalCents != 900 || p.Conversions != 4 || p.Currency != "USD" || !slices.Equal(p.Lines, want) || p.PaidAt != nil {
			t.Errorf("payout = %+v, want lines %+v", p, want)
		}
		if b := e.balance(key, alice, "USD"); b.OwedCents != 0 || b.InPayoutCents != 600 {
			t.Errorf("alice after the payout: %+v", b)
		}
		if r := e.call("POST", "/api/v1/payouts", key, map[string]any{"currency": "USD"}); r.status != 422 {
			t.Errorf("a second payout with nobody owed: %d %s", r.status, r.body)
		}

		csv := e.must(200, e.call("GET", "/api/v1/payouts/"+p.ID+"?format=csv", key, nil))
		if ct := csv.header.Get("Content-Type"); !strings.HasPrefix(ct, "text/csv") ||
			!strings.HasPrefix(string(csv.body), "partnerId,name,email,amount,currency,conversions\n") ||
			!strings.Contains(string(csv.body), alice+",Pat,") || !strings.Contains(string(csv.body), ",6.00,USD,3\n") || !strings.Contains(string(csv.body), ",3.00,USD,1\n") {
			t.Errorf("CSV %s: %s", ct, csv.body)
		}
		e.must(404, e.call("GET", "/api/v1/payouts/"+p.ID, otherKey, nil))
		e.must(404, e.call("POST", "/api/v1/payouts/"+p.ID+"/paid", otherKey, nil))

		// The next day: a new sale, and a refund of one in the payout.
		clock.Advance(24 * time.Hour)
		conv(usd, alice)
		e.must(200, e.call("POST", "/api/v1/conversions/"+a2.ID+"/reverse", key, map[string]any{"reason": "chargeback"}))
		if b := e.balance(key, alice, "USD"); b.OwedCents != 0 || b.InPayoutCents != 600 {
			t.Errorf("alice after a clawback: %+v, want owed 300 - 300", b)
		}
		e.booksBalance(key, "USD", alice, bob)

		var paid tally.Payout
		e.must(200, e.call("POST", "/api/v1/payouts/"+p.ID+"/paid", key, nil)).decode(t, &paid)
		if paid.Status != tally.PayoutPaid || paid.PaidAt == nil || len(paid.Lines) != 2 {
			t.Errorf("paid payout = %+v", paid)
		}
		if r := e.call("POST", "/api/v1/payouts/"+p.ID+"/paid", key, nil); r.status != 409 || r.errorCode() != "invalid_transition" {
			t.Errorf("paying twice: %d %s", r.status, r.body)
		}
		if b := e.balance(key, alice, "USD"); b.PaidCents != 600 || b.InPayoutCents != 0 {
			t.Errorf("alice once paid: %+v", b)
		}
		if got := events[tally.PayoutEventData](t, e.svc, brandID, tally.EventPayoutPaid); len(got) != 1 || got[0].PayoutID != p.ID || got[0].TotalCents != 900 || got[0].Partners != 2 {
			t.Errorf("payout.paid events = %+v", got)
		}

		// The clawback rides in the next payout: 300 + 300 - 300.
		conv(usd, alice)
		var next tally.Payout
		e.must(201, e.call("POST", "/api/v1/payouts", key, map[string]any{"currency": "USD", "partnerIds": []string{alice, bob}})).decode(t, &next)
		if next.TotalCents != 300 || len(next.Lines) != 1 || next.Lines[0] != (tally.PayoutLine{PartnerID: alice, AmountCents: 300, Conversions: 2}) {
			t.Errorf("next payout = %+v", next)
		}
		e.booksBalance(key, "USD", alice, bob)
		var eurPayout tally.Payout
		e.must(201, e.call("POST", "/api/v1/payouts", key, map[string]any{"currency": "EUR"})).decode(t, &eurPayout)
		if eurPayout.TotalCents != 500 {
			t.Errorf("EUR payout = %+v", eurPayout)
		}
		if ids := e.listAll("/api/v1/payouts", key); len(ids) != 3 || ids[2] != p.ID {
			t.Errorf("payouts listed %v, want 3, newest first", ids)
		}
		if ids := e.listAll("/api/v1/payouts?status=paid", key); len(ids) != 1 || ids[0] != p.ID {
			t.Errorf("paid payouts listed %v", ids)
		}
	})
}

// Payouts created at once split what is owed: no conversion is in two,
// and reversals racing them leave every partner's books balanced.
func TestConcurrentPayoutsAndReversalsKeepTheBooks(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 100_000})
		brandID, key := e.brand()
		offer := e.offer(key, nil)
		partners := []string{e.activePartner(brandID, key), e.activePartner(brandID, key), e.activePartner(brandID, key)}
		var cs []tally.Conversion
		for i := range 30 {
			cs = append(cs, e.convert(key, map[string]any{"offerId": offer, "partnerId": partners[i%3]}))
		}
		var wg sync.WaitGroup
		wg.Go(func() {
			for _, c := range cs[:12] {
				if r, err := e.try("POST", "/api/v1/conversions/"+c.ID+"/reverse", key, map[string]any{"reason": "fraud"}); err != nil || r.status != 200 {
					t.Errorf("reverse: %v %d %s", err, r.status, r.body)
				}
			}
		})
		answers, statuses := e.raceCalls(6, "POST", "/api/v1/payouts", key, func(int) any { return map[string]any{"currency": "USD"} })
		wg.Wait()
		if statuses[201] == 0 || statuses[201]+statuses[422] != 6 {
			t.Fatalf("statuses %v", statuses)
		}
		var lines, entries int64
		for _, a := range answers {
			if a.status != 201 {
				continue
			}
			var p tally.Payout
			a.decode(t, &p)
			var sum int64
			for _, l := range p.Lines {
				sum += l.AmountCents
				entries += l.Conversions
			}
			if sum != p.TotalCents || sum <= 0 {
				t.Errorf("payout %s totals %d, lines sum %d", p.ID, p.TotalCents, sum)
			}
			lines += sum
		}
		if entries > 30 {
			t.Errorf("payouts hold %d conversions; there are 30", entries)
		}
		var owed int64
		for _, id := range partners {
			owed += e.balance(key, id, "USD").OwedCents
		}
		if lines+owed != 18*300 {
			t.Errorf("lines %d + owed %d != %d, the approved conversions' payouts", lines, owed, 18*300)
		}
		e.booksBalance(key, "USD", partners...)
		// What is still owed can be paid out, once.
		if owed > 0 {
			e.must(201, e.call("POST", "/api/v1/payouts", key, map[string]any{"currency": "USD"}))
		}
		for _, id := range partners {
			if b := e.balance(key, id, "USD"); b.OwedCents > 0 {
				t.Errorf("partner %s still owed %d after the last payout", id, b.OwedCents)
			}
		}
	})
}
