package service_test

import (
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/testenv"
)

// BenchmarkReport30Days compares a 30-day report by day in UTC (daily
// rollups only) with the same in New York (quarter-hour rollups) and by
// month in New York (daily rollups but for the days a month boundary
// cuts), over 3,000 conversions of 4 offers and 5 partners spread over the
// 30 days, on the embedded store.
func BenchmarkReport30Days(b *testing.B) {
	st, err := bolt.Open(b.TempDir() + "/tally.db")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	f := &fixture{ctx: b.Context(), st: st, clock: testenv.NewClock(start)}
	f.svc = servicetest.New(st, service.WithClock(f.clock.Now))
	brand, err := f.svc.Identity.CreateBrand(f.ctx, "Bench")
	if err != nil {
		b.Fatal(err)
	}
	f.brandID = brand.ID
	var offerIDs []string
	var partnerIDs []string
	for range 4 {
		o, err := f.svc.Offers.CreateOffer(f.ctx, f.brandID, offers.OfferInput{Name: ptr("O"), DestinationURL: ptr("https://x.example/"),
			RevenueCents: ptr(int64(1000)), PayoutCents: ptr(int64(300)), Currency: ptr("USD")})
		if err != nil {
			b.Fatal(err)
		}
		offerIDs = append(offerIDs, o.ID)
	}
	for i := range 5 {
		p, err := f.svc.Partners.Apply(f.ctx, f.brandID, partners.ApplicationInput{Name: ptr("P"), Email: ptr("p" + string(rune('a'+i)) + "@x.example")})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := f.svc.Partners.ApprovePartner(f.ctx, f.brandID, p.ID); err != nil {
			b.Fatal(err)
		}
		partnerIDs = append(partnerIDs, p.ID)
	}
	first := start.AddDate(0, 0, -30)
	for i := range 3000 {
		f.clock.Set(first.Add(time.Duration(i) * 30 * 24 * time.Hour / 3000))
		if _, _, err := f.svc.Conversions.RecordConversion(f.ctx, f.brandID, conversions.ConversionInput{OfferID: &offerIDs[i%4], PartnerID: &partnerIDs[i%5]}); err != nil {
			b.Fatal(err)
		}
	}
	f.clock.Set(start)
	to := start.Format(time.DateOnly)
	from := first.Format(time.DateOnly)
	for name, q := range map[string]reports.ReportQuery{
		"day-UTC":           {From: from, To: to, GroupBy: []string{"day"}},
		"day-New_York":      {From: from, To: to, GroupBy: []string{"day"}, Timezone: "America/New_York"},
		"month-New_York":    {From: from, To: to, GroupBy: []string{"month"}, Timezone: "America/New_York"},
		"day-offer-Kolkata": {From: from, To: to, GroupBy: []string{"day", "offer"}, Timezone: "Asia/Kolkata"},
	} {
		b.Run(name, func(b *testing.B) {
			var rows int
			for b.Loop() {
				r, err := f.svc.Reports.Report(f.ctx, f.brandID, q)
				if err != nil {
					b.Fatal(err)
				}
				rows = len(r.Data)
			}
			b.ReportMetric(float64(rows), "rows")
		})
	}
}
