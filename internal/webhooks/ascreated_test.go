package webhooks

import (
	"bytes"
	"context"
	"sync"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// bodies is a Sender that answers status and keeps the bodies it sent.
type bodies struct {
	mu     sync.Mutex
	status int
	sent   [][]byte
}

func (b *bodies) Send(_ context.Context, r outgoing.Request) tally.Attempt {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.sent = append(b.sent, r.Body)
	return tally.Attempt{StatusCode: b.status}
}

// A conversion.created made from its conversion (the AWS fan-out) is the
// same on a manual retry after the conversion was reversed: the retry
// sends attempt 1's bytes, and the delivery log shows them, and finds the
// delivery by its conversion.
func TestManualRetrySendsTheConversionAsCreated(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		w := newWorld(t, st, withLoopback())
		b, err := w.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		url := "http://127.0.0.1:9/hooks"
		if _, err := w.CreateSubscription(ctx, b.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventConversionCreated}}); err != nil {
			t.Fatal(err)
		}
		p, err := w.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.ApprovePartner(ctx, b.ID, p.ID); err != nil {
			t.Fatal(err)
		}
		hold := 0
		o, err := w.CreateOffer(ctx, b.ID, offers.OfferInput{Name: ptrTo("Shoes"), DestinationURL: ptrTo("https://shop.example/?c={click_id}"),
			RevenueCents: ptrTo(int64(1000)), PayoutCents: ptrTo(int64(300)), Currency: ptrTo("USD"), Approval: ptrTo(tally.ApprovalAuto), HoldHours: &hold})
		if err != nil {
			t.Fatal(err)
		}
		c, _, err := w.RecordConversion(ctx, b.ID, conversions.ConversionInput{OfferID: &o.ID, PartnerID: &p.ID, ExternalTxnID: ptrTo("o-1")})
		if err != nil {
			t.Fatal(err)
		}
		item, err := st.Get(ctx, keys.Conversion(b.ID, c.ID))
		if err != nil {
			t.Fatal(err)
		}
		msgs, err := w.DispatchConversion(ctx, item, nil)
		if err != nil || len(msgs) != 1 {
			t.Fatalf("dispatch: %d messages, %v; want 1", len(msgs), err)
		}
		ref := msgs[0].DeliveryRef
		failing := &bodies{status: 500}
		if res, err := w.FirstAttempt(ctx, msgs[0], failing); err != nil || res.Status != tally.DeliveryPending {
			t.Fatalf("attempt 1: %+v, %v", res, err)
		}
		if res, err := w.AbandonDelivery(ctx, ref); err != nil || res.Status != tally.DeliveryFailed {
			t.Fatalf("abandon: %+v, %v", res, err)
		}
		if _, err := w.ReverseConversion(ctx, b.ID, c.ID, conversions.ReversalInput{Reason: ptrTo(tally.ReversalRefund)}); err != nil {
			t.Fatal(err)
		}

		shown, err := w.RetryDelivery(ctx, b.ID, ref.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		first := failing.sent[0]
		if shown.Request == nil || shown.Request.Body == nil || *shown.Request.Body != string(first) {
			t.Errorf("the retried delivery shows %+v, want attempt 1's body %s", shown.Request, first)
		}
		answering := &bodies{status: 200}
		if res, err := w.Attempt(ctx, ref, 1, answering); err != nil || res.Status != tally.DeliverySucceeded {
			t.Fatalf("the manual retry's attempt: %+v, %v", res, err)
		}
		if len(answering.sent) != 1 || !bytes.Equal(answering.sent[0], first) {
			t.Errorf("the manual retry sent\n%s\nattempt 1 sent\n%s", answering.sent, first)
		}
		listed, _, err := w.Deliveries(ctx, b.ID, endpoints.DeliveryFilter{ConversionID: c.ID, Status: tally.DeliverySucceeded}, records.ListParams{Limit: 10})
		if err != nil || len(listed) != 1 || listed[0].ID != ref.DeliveryID || *listed[0].Request.Body != string(first) {
			t.Errorf("the log of the conversion's succeeded deliveries: %+v, %v; want %s, with attempt 1's body", listed, err, ref.DeliveryID)
		}
	})
}
