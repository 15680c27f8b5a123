package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// endpointFixture is a brand with an active partner and an offer on the
// embedded store, served by a Service that leaves the events of brands
// without endpoints out of the outbox (svc), and by one that does not
// remember anything about them (other, as the CLI or a restarted server).
type endpointFixture struct {
	t          *testing.T
	ctx        context.Context
	st         store.Store
	svc, other *service.Service
	brand      tally.Brand
	partner    tally.Partner
	offer      tally.Offer
}

func newEndpointFixture(t *testing.T) *endpointFixture {
	f := &endpointFixture{t: t, ctx: t.Context(), st: testenv.Bolt(t)}
	f.svc = servicetest.New(f.st, service.WithLoopbackReceivers(), service.WithOutboxOnlyForEndpoints())
	f.other = servicetest.New(f.st, service.WithLoopbackReceivers())
	var err error
	if f.brand, err = f.svc.Identity.CreateBrand(f.ctx, "Acme"); err != nil {
		t.Fatal(err)
	}
	f.partner, err = f.svc.Partners.Apply(f.ctx, f.brand.ID, partners.ApplicationInput{Name: ptr("Pat"), Email: ptr("pat@example.com")})
	if err == nil {
		f.partner, err = f.svc.Partners.ApprovePartner(f.ctx, f.brand.ID, f.partner.ID)
	}
	if err == nil {
		f.offer, err = f.svc.Offers.CreateOffer(f.ctx, f.brand.ID, offers.OfferInput{Name: ptr("Shoes"), DestinationURL: ptr("https://shop.example/"),
			RevenueCents: ptr[int64](100), PayoutCents: ptr[int64](10), Currency: ptr("USD")})
	}
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *endpointFixture) convert(svc *service.Service, txn string) tally.Conversion {
	f.t.Helper()
	c, _, err := svc.Conversions.RecordConversion(f.ctx, f.brand.ID, conversions.ConversionInput{OfferID: &f.offer.ID, PartnerID: &f.partner.ID, ExternalTxnID: &txn})
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}

// queued returns the conversion ids of the brand's conversion.created
// events that wait in the outbox.
func (f *endpointFixture) queued() map[string]bool {
	f.t.Helper()
	out := map[string]bool{}
	for shard := range keys.QueueShards {
		q := store.Query{Index: store.GSI3, PK: keys.OutboxPK(shard), Limit: 1000}
		for {
			page, err := f.st.Query(f.ctx, q)
			if err != nil {
				f.t.Fatal(err)
			}
			for _, it := range page.Items {
				var evt tally.Event
				var data tally.ConversionEventData
				if err := records.Decode(it, &evt); err != nil || json.Unmarshal(evt.Data, &data) != nil {
					f.t.Fatalf("outbox entry %s: %v", it.SK, err)
				}
				out[data.ConversionID] = true
			}
			if q.Cursor = page.Cursor; q.Cursor == "" {
				break
			}
		}
	}
	return out
}

// A brand without endpoints writes its events without an outbox entry;
// once it has one, made by another process or by this one, its events are
// queued and delivered, though this Service remembered it without.
func TestEventsWaitInTheOutboxOnlyForBrandsWithEndpoints(t *testing.T) {
	for _, endpoint := range []string{"subscription", "postback"} {
		t.Run(endpoint, func(t *testing.T) {
			f := newEndpointFixture(t)
			before := f.convert(f.svc, "before")
			if q := f.queued(); len(q) != 0 {
				t.Fatalf("outbox of a brand without endpoints: %v, want it empty", q)
			}
			var err error
			if endpoint == "subscription" {
				_, err = f.other.Endpoints.CreateSubscription(f.ctx, f.brand.ID, endpoints.SubscriptionInput{URL: ptr("http://127.0.0.1:9/hooks"), Events: []string{tally.EventConversionCreated}})
			} else {
				_, err = f.other.Endpoints.PutPostback(f.ctx, f.brand.ID, f.partner.ID, endpoints.PostbackInput{URL: ptr("http://127.0.0.1:9/pb?c={conversion_id}")})
			}
			if err != nil {
				t.Fatal(err)
			}
			after := f.convert(f.svc, "after")
			if q := f.queued(); !q[after.ID] || q[before.ID] {
				t.Fatalf("outbox %v, want the conversion made after the %s (%s) only", q, endpoint, after.ID)
			}
			var made []endpoints.DeliveryRef
			for shard := range keys.QueueShards {
				page, err := f.st.Query(f.ctx, store.Query{Index: store.GSI3, PK: keys.OutboxPK(shard)})
				if err != nil {
					t.Fatal(err)
				}
				for _, it := range page.Items {
					recs, err := f.svc.Webhooks.FanOut(f.ctx, it.GSI3.SK)
					if err != nil {
						t.Fatal(err)
					}
					made = append(made, recs...)
				}
			}
			if len(made) != 1 || made[0].DeliveryID == "" {
				t.Fatalf("deliveries made: %+v, want one", made)
			}
		})
	}
}

// Conversions race a subscription's creation: every conversion begun after
// the subscription was created waits in the outbox for its delivery.
func TestConversionsAfterASubscriptionRacingThemAreQueued(t *testing.T) {
	f := newEndpointFixture(t)
	f.convert(f.svc, "first") // the brand is remembered without endpoints
	var (
		subscribed atomic.Bool
		mu         sync.Mutex
		later      []string
		wg         sync.WaitGroup
		n          atomic.Int64
	)
	for range 16 {
		wg.Go(func() {
			for i := n.Add(1); i <= 400; i = n.Add(1) {
				if i == 100 { // while the others go on converting
					if _, err := f.svc.Endpoints.CreateSubscription(f.ctx, f.brand.ID, endpoints.SubscriptionInput{URL: ptr("http://127.0.0.1:9/hooks"), Events: []string{tally.EventConversionCreated}}); err != nil {
						t.Error(err)
					}
					subscribed.Store(true)
				}
				after := subscribed.Load()
				c, _, err := f.svc.Conversions.RecordConversion(f.ctx, f.brand.ID, conversions.ConversionInput{OfferID: &f.offer.ID, PartnerID: &f.partner.ID, ExternalTxnID: ptr(fmt.Sprint("order-", i))})
				if err != nil {
					t.Error(err)
					return
				}
				if after {
					mu.Lock()
					later = append(later, c.ID)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	q := f.queued()
	if len(later) == 0 {
		t.Fatal("no conversion began after the subscription: the test shows nothing")
	}
	for _, id := range later {
		if !q[id] {
			t.Errorf("conversion %s, begun after the subscription was created, is not in the outbox", id)
		}
	}
	if len(q) >= 401 {
		t.Errorf("%d conversions queued: the ones before the subscription should not be", len(q))
	}
}
