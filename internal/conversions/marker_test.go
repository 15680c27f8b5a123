package conversions_test

import (
	"context"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// TestIdempotencyMarkersExpire checks that an (offer, externalTxnId)
// marker expires 400 days after its conversion (docs/decisions.md, "Idempotency
// markers expire"), longer than any window in which the pair can come
// again, on both stores and both ways of writing a conversion, and that
// the same pair replays the first conversion until then.
func TestIdempotencyMarkersExpire(t *testing.T) {
	const ttl = 400 * 24 * time.Hour
	for _, b := range testenv.Backends {
		for _, w := range []struct {
			name string
			opts []service.Option
		}{
			{"in one transaction", nil},
			{"for the stream", []service.Option{service.WithStreamConversions(), service.WithStreamRollups()}},
		} {
			t.Run(b.Name+"/"+w.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				clock := testenv.NewClock(testenv.Start())
				st := b.Open(t)
				svc := servicetest.New(st, append([]service.Option{service.WithClock(clock.Now)}, w.opts...)...)
				brand, err := svc.Identity.CreateBrand(ctx, "Acme Outdoor")
				if err != nil {
					t.Fatal(err)
				}
				ptr := func(s string) *string { return &s }
				revenue, payout := int64(4999), int64(750)
				offer, err := svc.Offers.CreateOffer(ctx, brand.ID, offers.OfferInput{
					Name: ptr("Boots"), DestinationURL: ptr("https://shop.example/boots?c={click_id}"), Currency: ptr("EUR"),
					RevenueCents: &revenue, PayoutCents: &payout,
				})
				if err != nil {
					t.Fatal(err)
				}
				p, err := svc.Partners.Apply(ctx, brand.ID, partners.ApplicationInput{Name: ptr("Trail Blog"), Email: ptr("trail@blog.example"), Website: ptr("https://trail.example")})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := svc.Partners.ApprovePartner(ctx, brand.ID, p.ID); err != nil {
					t.Fatal(err)
				}
				in := conversions.ConversionInput{OfferID: &offer.ID, PartnerID: &p.ID, ExternalTxnID: ptr("ORD-7")}
				first, created, err := svc.Conversions.RecordConversion(ctx, brand.ID, in)
				if err != nil || !created {
					t.Fatalf("record: created %v, %v", created, err)
				}
				clock.Advance(30 * 24 * time.Hour)
				again, created, err := svc.Conversions.RecordConversion(ctx, brand.ID, in)
				if err != nil || created || again.ID != first.ID {
					t.Errorf("the same externalTxnId 30 days on: %s created %v, %v; want the first, %s", again.ID, created, err, first.ID)
				}
				marker, err := st.Get(ctx, keys.Txn(brand.ID, offer.ID, "ORD-7"))
				if err != nil {
					t.Fatal(err)
				}
				// Either way, its marker holds only the conversion's id.
				if want := `"` + first.ID + `"`; string(marker.Data) != want {
					t.Errorf("marker holds %s, want %s", marker.Data, want)
				}
				if want := first.CreatedAt.Add(ttl).Unix(); marker.ExpiresAt != want {
					t.Errorf("marker expires at %s, want %s (400 days after the conversion)",
						time.Unix(marker.ExpiresAt, 0).UTC(), time.Unix(want, 0).UTC())
				}
			})
		}
	}
}
