package httpapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// The conversions function on AWS (service.OnAWS) writes a
// conversion without caps or clickId as two conditional puts, the marker
// (holding the conversion's id) first, and one with caps in a transaction;
// neither writes the conversion.created event (the fan-out makes it from
// the stream). These tests run that path on DynamoDB Local.

func TestSameTransactionPostedConcurrentlyOnAWSIsRecordedOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		offer map[string]any
	}{
		{"puts", nil},
		{"capped, a transaction", map[string]any{"caps": map[string]any{"daily": 1000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raceSameTransaction(t, testenv.DynamoDB(t), tc.offer, service.OnAWS())
		})
	}
}

func TestDailyCapUnderConcurrencyOnAWS(t *testing.T) {
	raceDailyCap(t, testenv.DynamoDB(t), service.OnAWS())
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
}

// stopBeforeConversion is the table failing the write of any conversion:
// a request stopped between its marker and its conversion.
type stopBeforeConversion struct{ store.Store }

func (s stopBeforeConversion) Transact(ctx context.Context, ops ...store.Op) error {
	for _, op := range ops {
		if op.Kind == store.OpPut && strings.Contains(op.Item.PK, "#CNV#") {
			return errors.New("stopped on purpose")
		}
	}
	return s.Store.Transact(ctx, ops...)
}

// A conversion's request stopped after its marker, before the conversion:
// it answered 500, and nothing is listed. Its client's retries, many at
// once, complete it: exactly one writes it, with the marker's id, and
// answers 201; the others answer 200 with that conversion; one conversion
// is stored, and later retries replay it.
func TestRetriesCompleteAConversionStoppedAfterItsMarkerOnAWS(t *testing.T) {
	st := testenv.DynamoDB(t)
	stopped := newEnv(t, stopBeforeConversion{st}, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	brandID, key := e.brand()
	offerID := e.offer(key, nil)
	partnerID := e.activePartner(brandID, key)
	body := map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1", "revenueCents": 4200}
	if r := stopped.call("POST", "/api/v1/conversions", key, body); r.status != 500 {
		t.Fatalf("the stopped request answered %d %s, want 500", r.status, r.body)
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 0 {
		t.Fatalf("%d conversions listed after the stopped request, want none", len(got))
	}
	marker, err := st.Get(t.Context(), keys.Txn(brandID, offerID, "order-1"))
	if err != nil {
		t.Fatal(err)
	}
	var markerID string
	if err := json.Unmarshal(marker.Data, &markerID); err != nil {
		t.Fatalf("marker holds %s, want the conversion's id: %v", marker.Data, err)
	}

	answers, statuses := e.raceCalls(50, "POST", "/api/v1/conversions", key, func(int) any { return body })
	if statuses[201] != 1 || statuses[200] != 49 {
		t.Errorf("statuses = %v, want one 201 and 49 200s", statuses)
	}
	for _, r := range answers {
		if id := r.field(t, "id"); id != markerID {
			t.Fatalf("an answer named %s, want the marker's %s", id, markerID)
		}
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 1 {
		t.Errorf("%d conversions stored, want 1", len(got))
	}
	r := e.must(200, e.call("POST", "/api/v1/conversions", key, body))
	if r.field(t, "id") != markerID {
		t.Errorf("a later retry answered %s, want %s", r.body, markerID)
	}
}

// A request without a click stopped after its marker; its retries name
// the click instead (a postback with click_id and txn_id): they complete
// the conversion through the click's write, with the marker's id, and the
// click is marked with it.
func TestRetriesWithAClickCompleteAStoppedConversionOnAWS(t *testing.T) {
	st := testenv.DynamoDB(t)
	stopped := newEnv(t, stopBeforeConversion{st}, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	brandID, key := e.brand()
	offerID := e.offer(key, map[string]any{"destinationUrl": "https://shop.example/p?c={click_id}"})
	partnerID := e.activePartner(brandID, key)
	clickID := e.click(offerID, partnerID, "")
	first := map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1"}
	if r := stopped.call("POST", "/api/v1/conversions", key, first); r.status != 500 {
		t.Fatalf("the stopped request answered %d %s, want 500", r.status, r.body)
	}
	marker, err := st.Get(t.Context(), keys.Txn(brandID, offerID, "order-1"))
	if err != nil {
		t.Fatal(err)
	}
	var markerID string
	if err := json.Unmarshal(marker.Data, &markerID); err != nil {
		t.Fatal(err)
	}
	retry := map[string]any{"clickId": clickID, "externalTxnId": "order-1"}
	answers, statuses := e.raceCalls(10, "POST", "/api/v1/conversions", key, func(int) any { return retry })
	if statuses[201] != 1 || statuses[200] != 9 {
		t.Errorf("statuses = %v, want one 201 and 9 200s", statuses)
	}
	for _, r := range answers {
		if id := r.field(t, "id"); id != markerID {
			t.Fatalf("an answer named %s (%s), want the marker's %s", id, r.body, markerID)
		}
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 1 {
		t.Errorf("%d conversions stored, want 1", len(got))
	}
	if got := e.must(200, e.call("GET", "/api/v1/clicks/"+clickID, key, nil)).field(t, "conversionId"); got != markerID {
		t.Errorf("the click's conversionId is %q, want %s", got, markerID)
	}
}

// A marker holding the whole conversion (written by an older version of
// the conversions function) still replays: with the conversion stored, the
// retry answers 200 with it; without it (its request stopped), the retry
// writes the conversion as the marker holds it and answers 201.
func TestWholeMarkerReplaysOnAWS(t *testing.T) {
	st := testenv.DynamoDB(t)
	e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.OnAWS())
	brandID, key := e.brand()
	offerID := e.offer(key, nil)
	partnerID := e.activePartner(brandID, key)
	body := func(revenue int) map[string]any {
		return map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1", "revenueCents": revenue}
	}
	first := e.must(201, e.call("POST", "/api/v1/conversions", key, body(4200)))
	var c tally.Conversion
	first.decode(t, &c)
	whole := store.Item{Key: keys.Txn(brandID, offerID, "order-1"), Data: first.body, ExpiresAt: time.Now().Add(time.Hour).Unix()}
	if err := st.Transact(t.Context(), store.Put(whole)); err != nil {
		t.Fatal(err)
	}
	if r := e.must(200, e.call("POST", "/api/v1/conversions", key, body(9900))); r.field(t, "id") != c.ID {
		t.Errorf("retry with the conversion stored: %s, want %s", r.body, c.ID)
	}
	if err := st.Transact(t.Context(), store.Delete(keys.Conversion(brandID, c.ID))); err != nil {
		t.Fatal(err)
	}
	var completed tally.Conversion
	e.must(201, e.call("POST", "/api/v1/conversions", key, body(9900))).decode(t, &completed)
	if completed.ID != c.ID || completed.RevenueCents != 4200 {
		t.Errorf("retry without the conversion: %s with %d cents, want %s as the marker holds it (4200)", completed.ID, completed.RevenueCents, c.ID)
	}
	if got := e.listAll("/api/v1/conversions", key); len(got) != 1 {
		t.Errorf("%d conversions stored, want 1", len(got))
	}
}
