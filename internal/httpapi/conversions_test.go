package httpapi_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// eventCount counts a brand's events with the given name.
func eventCount(t *testing.T, svc *service.Service, brandID, name string) int {
	t.Helper()
	return len(events[json.RawMessage](t, svc, brandID, name))
}

// listAll pages through a list endpoint and returns every item's id.
func (e *env) listAll(path, secret string) []string {
	e.t.Helper()
	var ids []string
	cursor := ""
	for {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		url := path + sep + "limit=100"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		var page struct {
			Data       []struct{ ID string }
			NextCursor *string
		}
		e.must(200, e.call("GET", url, secret, nil)).decode(e.t, &page)
		for _, it := range page.Data {
			ids = append(ids, it.ID)
		}
		if page.NextCursor == nil {
			return ids
		}
		cursor = *page.NextCursor
	}
}

func TestSameTransactionPostedConcurrentlyIsRecordedOnce(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e, brandID, key, partnerID := raceSameTransaction(t, st, nil)
		if n := eventCount(t, e.svc, brandID, tally.EventConversionCreated); n != 1 {
			t.Errorf("%d conversion.created events, want 1", n)
		}
		// The same transaction id on another offer is another conversion.
		other := e.offer(key, nil)
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": other, "partnerId": partnerID, "externalTxnId": "order-1001"}))
	})
}

func TestDailyCapUnderConcurrency(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e, brandID, key := raceDailyCap(t, st)
		if n := eventCount(t, e.svc, brandID, tally.EventConversionCreated); n != raceCap {
			t.Errorf("%d conversion.created events, want %d", n, raceCap)
		}
		var report struct{ Data []tally.ReportRow }
		e.must(200, e.call("GET", "/api/v1/reports", key, nil)).decode(t, &report)
		if len(report.Data) != 1 || report.Data[0].Conversions != raceCap || report.Data[0].RevenueCents != raceCap*1000 {
			t.Errorf("report = %+v, want %d conversions worth %d", report.Data, raceCap, raceCap*1000)
		}
	})
}

// raceSameTransaction posts one conversion 50 times at once to an offer
// made with offer's fields, on a service over st with opts, and checks
// that it is recorded once and every answer names it.
func raceSameTransaction(t *testing.T, st store.Store, offer map[string]any, opts ...service.Option) (e *env, brandID, key, partnerID string) {
	t.Helper()
	e = newEnv(t, st, httpapi.Config{RateLimit: 10_000}, opts...)
	brandID, key = e.brand()
	offerID := e.offer(key, offer)
	partnerID = e.activePartner(brandID, key)

	answers, statuses := e.raceCalls(50, "POST", "/api/v1/conversions", key, func(int) any {
		return map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1001"}
	})
	convIDs := map[string]bool{}
	for _, r := range answers {
		convIDs[r.field(t, "id")] = true
	}
	if statuses[201] != 1 || statuses[200] != 49 {
		t.Errorf("statuses = %v, want one 201 and 49 200s", statuses)
	}
	if len(convIDs) != 1 {
		t.Errorf("answers named %d conversions, want 1: %v", len(convIDs), convIDs)
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 1 {
		t.Errorf("%d conversions stored, want 1", len(got))
	}
	return e, brandID, key, partnerID
}

// raceCap conversions of raceRacers posted at once fit an offer's daily cap.
const raceCap, raceRacers = 25, 100

// raceDailyCap posts raceRacers conversions at once to an offer with a
// daily cap of raceCap, on a service over st with opts, and checks that
// raceCap are recorded, the others refused, and cap.reached written once.
func raceDailyCap(t *testing.T, st store.Store, opts ...service.Option) (e *env, brandID, key string) {
	t.Helper()
	e = newEnv(t, st, httpapi.Config{RateLimit: 10_000}, opts...)
	brandID, key = e.brand()
	offerID := e.offer(key, map[string]any{"caps": map[string]any{"daily": raceCap}})
	partnerID := e.activePartner(brandID, key)

	body := func(i int) any {
		return map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": fmt.Sprint("order-", i)}
	}
	answers, _ := e.raceCalls(raceRacers, "POST", "/api/v1/conversions", key, body)
	// A 409 conflict (writers on the cap counter outlasted the service's
	// retries, as on a loaded machine) asks the client to retry: do so.
	statuses, codes := map[int]int{}, map[string]int{}
	for i, r := range answers {
		for try := 0; r.status == 409 && r.errorCode() == tally.ECodeConflict && try < 5; try++ {
			r = e.call("POST", "/api/v1/conversions", key, body(i))
		}
		statuses[r.status]++
		codes[r.errorCode()]++
	}
	if refused := raceRacers - raceCap; statuses[201] != raceCap || statuses[422] != refused || codes["cap_reached"] != refused {
		t.Errorf("statuses = %v, codes = %v; want %d 201s and %d 422 cap_reached", statuses, codes, raceCap, refused)
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != raceCap {
		t.Errorf("%d conversions stored, want %d", len(got), raceCap)
	}
	if n := eventCount(t, e.svc, brandID, tally.EventCapReached); n != 1 {
		t.Errorf("%d cap.reached events, want exactly 1", n)
	}
	return e, brandID, key
}

// The offer's default amounts are in its currency: a conversion in another
// currency must bring both amounts, or its books would mix currencies.
func TestConversionInAnotherCurrencyNeedsItsAmounts(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{})
		brandID, key := e.brand()
		partnerID := e.activePartner(brandID, key)
		offerID := e.offer(key, nil) // USD 1000 / 300
		for _, body := range []map[string]any{
			{"offerId": offerID, "partnerId": partnerID, "revenueCents": 500, "currency": "EUR"},
			{"offerId": offerID, "partnerId": partnerID, "payoutCents": 150, "currency": "EUR"},
			{"offerId": offerID, "partnerId": partnerID, "currency": "EUR", "externalTxnId": "o-1"},
		} {
			if r := e.call("POST", "/api/v1/conversions", key, body); r.status != 422 || r.errorCode() != "validation_error" ||
				!strings.Contains(string(r.body), "needs both revenueCents and payoutCents in EUR") {
				t.Errorf("%v: %d %s, want 422 naming both amounts", body, r.status, r.body)
			}
		}
		if n := len(e.listAll("/api/v1/conversions", key)); n != 0 {
			t.Errorf("%d conversions stored after refusals", n)
		}
		var c tally.Conversion
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "currency": "USD"})).decode(t, &c)
		if c.RevenueCents != 1000 || c.PayoutCents != 300 || c.Currency != "USD" {
			t.Errorf("naming the offer's own currency: %+v, want its defaults", c)
		}
	})
}

func TestConversionStatusFollowsOfferAndPartner(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{})
	brandID, key := e.brand()
	partnerID := e.activePartner(brandID, key)
	manual := e.offer(key, map[string]any{"approval": "manual", "holdHours": 48})
	r := e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": manual, "partnerId": partnerID, "revenueCents": 500, "payoutCents": 150, "currency": "EUR"}))
	var c tally.Conversion
	r.decode(t, &c)
	if c.Status != "pending" || c.ApproveAt == nil || c.RevenueCents != 500 || c.PayoutCents != 150 || c.Currency != "EUR" {
		t.Errorf("conversion on a manual offer = %+v; want pending with approveAt and the given amounts and currency", c)
	}
	e.must(200, e.call("POST", "/api/v1/conversions/"+c.ID+"/approve", key, nil))
	if r := e.call("POST", "/api/v1/conversions/"+c.ID+"/reject", key, nil); r.status != 409 || r.errorCode() != "invalid_transition" {
		t.Errorf("rejecting an approved conversion: %d %s", r.status, r.body)
	}

	paused := e.offer(key, map[string]any{"status": "paused"})
	if r := e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": paused, "partnerId": partnerID}); r.status != 422 {
		t.Errorf("conversion on a paused offer: %d %s", r.status, r.body)
	}
	auto := e.offer(key, nil)
	e.must(200, e.call("POST", "/api/v1/partners/"+partnerID+"/ban", key, nil))
	if r := e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": auto, "partnerId": partnerID}); r.status != 422 || r.errorCode() != "validation_error" {
		t.Errorf("conversion for a banned partner: %d %s", r.status, r.body)
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 1 {
		t.Errorf("%d conversions stored, want only the first", len(got))
	}
}

// An externalTxnId is matched exactly: one with white space around it
// would be a second conversion of the same order, paid twice. It is
// refused, in the JSON API and in an advertiser's GET postback alike, and
// nothing is recorded; an empty one still means no idempotency.
func TestExternalTxnIDWithWhiteSpaceAroundIsRefused(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000})
	brandID, key := e.brand()
	offerID := e.offer(key, clickDest)
	partnerID := e.activePartner(brandID, key)
	e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1"}))

	for _, txn := range []string{" ", "   ", "\u00a0", "order-1 ", " order-1", "\u00a0order-1"} {
		r := e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": txn})
		if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "externalTxnId") {
			t.Errorf("externalTxnId %q: %d %s, want 422 validation_error naming externalTxnId", txn, r.status, r.body)
		}
	}
	var tok identity.CreatedPostbackToken
	e.must(201, e.call("POST", "/api/v1/postback-token", key, nil)).decode(t, &tok)
	clickID := e.click(offerID, partnerID, "")
	for _, txn := range []string{" ", "order-1 "} {
		q := url.Values{"click_id": {clickID}, "txn_id": {txn}, "token": {tok.Token}}
		r := e.call("GET", "/postback?"+q.Encode(), "", nil)
		if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "txn_id") {
			t.Errorf("GET postback txn_id %q: %d %s, want 422 validation_error naming txn_id", txn, r.status, r.body)
		}
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 1 {
		t.Errorf("%d conversions after the refused ones, want only order-1", len(got))
	}
	if n := eventCount(t, e.svc, brandID, tally.EventConversionCreated); n != 1 {
		t.Errorf("%d conversion.created events, want 1", n)
	}
	// No transaction id at all is still a conversion, each time.
	for range 2 {
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": ""}))
	}
}
