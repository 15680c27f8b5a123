package service_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/validate"
)

// A click expires from the table a week after its offer's attribution
// window, so the table does not grow forever yet every click a conversion
// may still name is there.
func TestClickExpiresAfterTheAttributionWindow(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		now := testenv.Start()
		svc := servicetest.New(st, service.WithClock(func() time.Time { return now }))
		b, err := svc.Identity.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.Partners.Apply(ctx, b.ID, partners.ApplicationInput{Name: ptr("Pat"), Email: ptr("pat@example.com")})
		if err == nil {
			_, err = svc.Partners.ApprovePartner(ctx, b.ID, p.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, days := range []*int{nil, ptr(7), ptr(365)} {
			o, err := svc.Offers.CreateOffer(ctx, b.ID, offers.OfferInput{Name: ptr("Shoes"), DestinationURL: ptr("https://shop.example/"),
				RevenueCents: ptr[int64](100), PayoutCents: ptr[int64](10), Currency: ptr("USD"), AttributionWindowDays: days})
			if err != nil {
				t.Fatal(err)
			}
			c, _, err := svc.Clicks.RecordClick(ctx, clicks.ClickInput{OfferID: o.ID, PartnerID: p.ID, IP: netip.MustParseAddr("192.0.2.1")})
			if err != nil {
				t.Fatal(err)
			}
			it, err := st.Get(ctx, keys.Click(b.ID, c.ID))
			if err != nil {
				t.Fatal(err)
			}
			window := validate.Deref(days, tally.DefaultAttributionWindowDays)
			if want := now.AddDate(0, 0, window+7).Unix(); it.ExpiresAt != want {
				t.Errorf("window %d days: the click expires at %v, want %v", window, time.Unix(it.ExpiresAt, 0).UTC(), time.Unix(want, 0).UTC())
			}
		}
	})
}
