package httpapi_test

import (
	"strconv"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// The conversions function on AWS (service.OnAWS) writes a
// conversion without caps or clickId as conditional puts, the marker
// first, and one with caps in a transaction; neither writes the
// conversion.created event (the fan-out makes it from the stream), each
// writes one outbox entry. These tests run that path on DynamoDB Local.

// conversionOutbox counts the conversions' outbox entries in st.
func conversionOutbox(t *testing.T, st store.Store) int {
	t.Helper()
	n := 0
	for shard := range 32 {
		page, err := st.Query(t.Context(), store.Query{PK: "OBX#" + strconv.Itoa(shard), Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		n += len(page.Items)
	}
	return n
}

func TestSameTransactionPostedConcurrentlyOnAWSIsRecordedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		offer map[string]any
	}{
		{"puts", nil},
		{"capped, a transaction", map[string]any{"caps": map[string]any{"daily": 1000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := testenv.DynamoDB(t)
			raceSameTransaction(t, st, tc.offer, service.OnAWS())
			if n := conversionOutbox(t, st); n != 1 {
				t.Errorf("%d outbox entries, want 1", n)
			}
		})
	}
}

func TestDailyCapUnderConcurrencyOnAWS(t *testing.T) {
	st := testenv.DynamoDB(t)
	raceDailyCap(t, st, service.OnAWS())
	if n := conversionOutbox(t, st); n != raceCap {
		t.Errorf("%d outbox entries, want the %d conversions'", n, raceCap)
	}
}

// On AWS the offer's and the partner's status are read just before the
// write, not checked in it: an instance that has the offer cached refuses
// a conversion at once when another instance paused the offer or banned
// the partner, and accepts again once the offer is active. A refused
// conversion writes nothing; a retry of an accepted one still replays.
func TestConversionOnAWSFollowsPauseAndBanAtOnce(t *testing.T) {
	st := testenv.DynamoDB(t)
	a := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	b := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	brandID, key := a.brand()
	offerID := a.offer(key, nil)
	partnerID := a.activePartner(brandID, key)
	post := func(txn string) response {
		return a.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": txn})
	}
	first := a.must(201, post("order-1"))

	b.must(200, b.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"status": "paused"}))
	if r := post("order-2"); r.status != 422 || r.errorCode() != "validation_error" {
		t.Errorf("conversion on an offer paused by another instance: %d %s", r.status, r.body)
	}
	b.must(200, b.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"status": "active"}))
	a.must(201, post("order-3"))

	b.must(200, b.call("POST", "/api/v1/partners/"+partnerID+"/ban", key, nil))
	for _, txn := range []string{"order-4", "order-2"} { // a new one, and the one refused before
		if r := post(txn); r.status != 422 || r.errorCode() != "validation_error" {
			t.Errorf("conversion %s for a partner banned by another instance: %d %s", txn, r.status, r.body)
		}
	}
	// A retry of a conversion accepted before replays it, as on the local
	// server (the marker's condition answers first in its transaction).
	if r := post("order-1"); r.status != 200 || r.field(t, "id") != first.field(t, "id") {
		t.Errorf("a retry of an accepted conversion after the ban: %d %s, want 200 with it", r.status, r.body)
	}
	if got := a.listAll("/api/v1/conversions", key); len(got) != 2 {
		t.Errorf("%d conversions stored, want the 2 accepted", len(got))
	}
	if n := conversionOutbox(t, st); n != 2 {
		t.Errorf("%d outbox entries, want the 2 accepted conversions'", n)
	}
}
