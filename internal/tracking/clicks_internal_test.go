package tracking

import (
	"net/netip"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/offers"
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
		svc := New(st, WithClock(func() time.Time { return now }))
		b, err := svc.CreateBrand(ctx, "Acme")
		if err != nil {
			t.Fatal(err)
		}
		p, err := svc.Apply(ctx, b.ID, ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")})
		if err == nil {
			_, err = svc.ApprovePartner(ctx, b.ID, p.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, days := range []*int{nil, ptrTo(7), ptrTo(365)} {
			o, err := svc.CreateOffer(ctx, b.ID, OfferInput{Name: ptrTo("Shoes"), DestinationURL: ptrTo("https://shop.example/"),
				RevenueCents: ptrTo[int64](100), PayoutCents: ptrTo[int64](10), Currency: ptrTo("USD"), AttributionWindowDays: days})
			if err != nil {
				t.Fatal(err)
			}
			c, _, err := svc.RecordClick(ctx, ClickInput{OfferID: o.ID, PartnerID: p.ID, IP: netip.MustParseAddr("192.0.2.1")})
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

func TestFillMacros(t *testing.T) {
	c := tally.Click{ID: "clk_1", OfferID: "off_2", PartnerID: "prt_3", Sub1: "a b&c", Sub2: "é", Sub5: "x/y"}
	for dest, want := range map[string]string{
		"https://shop.example/":                         "https://shop.example/",
		"https://s.example/?c={click_id}":               "https://s.example/?c=clk_1",
		"https://s.example/{offer_id}/{partner_id}":     "https://s.example/off_2/prt_3",
		"https://s.example/?s={sub1}&t={sub1}":          "https://s.example/?s=a+b%26c&t=a+b%26c",
		"https://s.example/?a={sub2}&b={sub3}&e={sub5}": "https://s.example/?a=%C3%A9&b=&e=x%2Fy",
		"https://s.example/?k={keep}&c={click_id}":      "https://s.example/?k={keep}&c=clk_1",
		"https://s.example/?x={a{click_id}":             "https://s.example/?x={aclk_1",
		"https://s.example/?x=}{click_id}{":             "https://s.example/?x=}clk_1{",
		"https://s.example/?c={click_id":                "https://s.example/?c={click_id",
		"https://s.example/?c={}":                       "https://s.example/?c={}",
	} {
		if got := offers.FillMacros(dest, c); got != want {
			t.Errorf("fillMacros(%q) = %q, want %q", dest, got, want)
		}
	}
}
