package httpapi_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// oasMoneySetup is what the money part of the OpenAPI session starts
// from: an active partner with an approved conversion in the offer's
// currency and an approved one in EUR, a banned partner.
type oasMoneySetup struct {
	offer                 tally.Offer
	active, banned        string
	approved, approvedEUR string
	otherKey              string
	st                    store.Store
}

// oasFullTerms gives offer terms for n made-up partners besides its own,
// straight in the store (the API would need n partners), and returns what
// puts the offer back as it was.
func oasFullTerms(t *testing.T, st store.Store, offer tally.Offer, n int) (restore func()) {
	t.Helper()
	ctx := t.Context()
	key := keys.Offer(offer.BrandID, offer.ID)
	before, err := st.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	if err := json.Unmarshal(before.Data, &body); err != nil {
		t.Fatal(err)
	}
	terms, _ := body["partnerTerms"].(map[string]any)
	if terms == nil {
		terms = map[string]any{}
	}
	for i := 0; len(terms) < n; i++ {
		id := fmt.Sprintf("prt_%026d", i)
		terms[id] = map[string]any{"offerId": offer.ID, "partnerId": id, "payoutCents": 1, "payoutPercent": nil, "updatedAt": "2026-01-01T00:00:00Z"}
	}
	body["partnerTerms"] = terms
	full := before
	full.Nums = map[string]int64{"rev": before.Nums["rev"] + 1}
	if full.Data, err = json.Marshal(body); err != nil {
		t.Fatal(err)
	}
	if err := st.Transact(ctx, store.Put(full)); err != nil {
		t.Fatal(err)
	}
	return func() {
		before.Nums = map[string]int64{"rev": full.Nums["rev"] + 1}
		if err := st.Transact(ctx, store.Put(before)); err != nil {
			t.Fatal(err)
		}
	}
}

// oasMoney drives reversals, reinstatement, payout terms, balances and
// payouts through the document's every answer but 401 and 429 (the
// session's keyed calls make those), emitting conversion.reversed,
// partner.reactivated and payout.paid. It returns the calls that need a
// key, for those.
func oasMoney(t *testing.T, call, withKey func(oasCall) oasAnswer, s oasMoneySetup) []oasCall {
	t.Helper()
	now := time.Now().UTC()
	noPartner, noConversion, noPayout := ids.New("prt_", now), ids.New("cnv_", now), ids.New("pay_", now)

	// Reversal.
	reverse := "/api/v1/conversions/" + s.approved + "/reverse"
	for _, body := range []any{map[string]any{}, map[string]any{"reason": "returned"}, map[string]any{"reason": "refund", "note": strings.Repeat("n", 1001)}} {
		withKey(oasCall{method: "POST", path: reverse, status: 422, code: "validation_error", invalid: true, body: body})
	}
	withKey(oasCall{method: "POST", path: reverse, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"reason":`)})
	withKey(oasCall{method: "POST", path: reverse, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "POST", path: reverse, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "POST", path: "/api/v1/conversions/" + noConversion + "/reverse", status: 404, code: "not_found", body: map[string]any{"reason": "refund"}})
	call(oasCall{method: "POST", path: reverse, key: s.otherKey, status: 404, code: "not_found", body: map[string]any{"reason": "refund"}})
	reversed := oasAs[tally.Conversion](t, withKey(oasCall{method: "POST", path: reverse, status: 200, body: map[string]any{"reason": "refund", "note": "Returned in store"}}))
	if reversed.Status != tally.ConversionReversed || reversed.ReversalReason != "refund" {
		t.Errorf("reversed conversion: %+v", reversed)
	}
	withKey(oasCall{method: "POST", path: reverse, status: 409, code: "invalid_transition", body: map[string]any{"reason": "refund"}})

	// Reinstatement.
	reactivate := "/api/v1/partners/" + s.banned + "/reactivate"
	if p := oasAs[tally.Partner](t, withKey(oasCall{method: "POST", path: reactivate, status: 200})); p.Status != tally.PartnerActive {
		t.Errorf("reactivated partner: %+v", p)
	}
	withKey(oasCall{method: "POST", path: reactivate, status: 409, code: "invalid_transition"})
	withKey(oasCall{method: "POST", path: "/api/v1/partners/" + noPartner + "/reactivate", status: 404, code: "not_found"})
	call(oasCall{method: "POST", path: reactivate, key: s.otherKey, status: 404, code: "not_found"})

	// Payout terms.
	terms := "/api/v1/offers/" + s.offer.ID + "/partners/" + s.active + "/terms"
	withKey(oasCall{method: "GET", path: terms, status: 404, code: "not_found"})
	for _, body := range []any{map[string]any{}, map[string]any{"payoutCents": 1, "payoutPercent": 1}, map[string]any{"payoutPercent": 100.5}} {
		withKey(oasCall{method: "PUT", path: terms, status: 422, code: "validation_error", invalid: true, body: body})
	}
	withKey(oasCall{method: "PUT", path: terms, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"payoutCents":`)})
	withKey(oasCall{method: "PUT", path: terms, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "PUT", path: terms, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	withKey(oasCall{method: "PUT", path: "/api/v1/offers/" + s.offer.ID + "/partners/" + noPartner + "/terms", status: 404, code: "not_found", body: map[string]any{"payoutCents": 1}})
	call(oasCall{method: "PUT", path: terms, key: s.otherKey, status: 404, code: "not_found", body: map[string]any{"payoutCents": 1}})
	set := oasAs[tally.PayoutTerms](t, withKey(oasCall{method: "PUT", path: terms, status: 200, body: map[string]any{"payoutPercent": 12.5}}))
	if set.PayoutPercent == nil || *set.PayoutPercent != 1250 {
		t.Errorf("terms: %+v", set)
	}
	withKey(oasCall{method: "GET", path: terms, status: 200})
	call(oasCall{method: "GET", path: terms, key: s.otherKey, status: 404, code: "not_found"})
	// An offer holds terms for 1,000 partners at most: a 1,001st is refused.
	restore := oasFullTerms(t, s.st, s.offer, 1000)
	withKey(oasCall{method: "PUT", path: "/api/v1/offers/" + s.offer.ID + "/partners/" + s.banned + "/terms", status: 409, code: "conflict", body: map[string]any{"payoutCents": 1}})
	restore()
	withKey(oasCall{method: "DELETE", path: terms, status: 200})
	withKey(oasCall{method: "DELETE", path: terms, status: 404, code: "not_found"})

	// Balances and payouts: the active partner is owed its EUR conversion.
	balance := "/api/v1/partners/" + s.active + "/balance"
	withKey(oasCall{method: "GET", path: balance, status: 200})
	withKey(oasCall{method: "GET", path: "/api/v1/partners/" + noPartner + "/balance", status: 404, code: "not_found"})
	call(oasCall{method: "GET", path: balance, key: s.otherKey, status: 404, code: "not_found"})
	payouts := "/api/v1/payouts"
	for _, body := range []any{map[string]any{}, map[string]any{"currency": "EUR", "partnerIds": []string{}}, map[string]any{"currency": "EUR", "through": "2026-02-30x"}} {
		withKey(oasCall{method: "POST", path: payouts, status: 422, code: "validation_error", invalid: true, body: body})
	}
	withKey(oasCall{method: "POST", path: payouts, status: 422, code: "validation_error", body: map[string]any{"currency": "JPY"}})
	withKey(oasCall{method: "POST", path: payouts, status: 400, code: "invalid_json", invalid: true, body: oasRaw(`{"currency"`)})
	withKey(oasCall{method: "POST", path: payouts, status: 415, code: "unsupported_media_type", invalid: true, body: oasRaw(`{}`), contentType: "text/plain"})
	withKey(oasCall{method: "POST", path: payouts, status: 413, code: "payload_too_large", invalid: true, body: oasBig()})
	p := oasAs[tally.Payout](t, withKey(oasCall{method: "POST", path: payouts, status: 201, body: map[string]any{"currency": "EUR", "through": now.Format(time.DateOnly)}}))
	if p.Status != tally.PayoutPending || len(p.Lines) != 1 || p.Lines[0].PartnerID != s.active {
		t.Errorf("payout: %+v", p)
	}
	withKey(oasCall{method: "GET", path: payouts, status: 200})
	withKey(oasCall{method: "GET", path: payouts + "?status=pending&limit=10", status: 200})
	withKey(oasCall{method: "GET", path: payouts + "?status=late", status: 422, code: "validation_error", invalid: true})
	one := payouts + "/" + p.ID
	withKey(oasCall{method: "GET", path: one, status: 200})
	withKey(oasCall{method: "GET", path: one + "?format=csv", status: 200})
	withKey(oasCall{method: "GET", path: one + "?format=xml", status: 422, code: "validation_error", invalid: true})
	withKey(oasCall{method: "GET", path: payouts + "/" + noPayout, status: 404, code: "not_found"})
	call(oasCall{method: "GET", path: one, key: s.otherKey, status: 404, code: "not_found"})
	paid := oasAs[tally.Payout](t, withKey(oasCall{method: "POST", path: one + "/paid", status: 200}))
	if paid.Status != tally.PayoutPaid || paid.PaidAt == nil {
		t.Errorf("paid payout: %+v", paid)
	}
	withKey(oasCall{method: "POST", path: one + "/paid", status: 409, code: "invalid_transition"})
	withKey(oasCall{method: "POST", path: payouts + "/" + noPayout + "/paid", status: 404, code: "not_found"})
	call(oasCall{method: "POST", path: one + "/paid", key: s.otherKey, status: 404, code: "not_found"})

	return []oasCall{
		{method: "POST", path: reverse, body: map[string]any{"reason": "refund"}},
		{method: "POST", path: reactivate},
		{method: "GET", path: terms},
		{method: "PUT", path: terms, body: map[string]any{"payoutCents": 1}},
		{method: "DELETE", path: terms},
		{method: "GET", path: balance},
		{method: "GET", path: payouts},
		{method: "POST", path: payouts, body: map[string]any{"currency": "EUR"}},
		{method: "GET", path: one},
		{method: "POST", path: one + "/paid"},
	}
}
