package service_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// fixture is one brand on a fresh store with a controllable clock.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	st      store.Store
	clock   *testenv.Clock
	svc     *service.Service
	brandID string
}

var start = testenv.Start()

func newFixture(t *testing.T, st store.Store) *fixture {
	f := &fixture{t: t, ctx: context.Background(), st: st, clock: testenv.NewClock(start)}
	f.svc = servicetest.New(st, service.WithClock(f.clock.Now))
	b, err := f.svc.Identity.CreateBrand(f.ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	f.brandID = b.ID
	return f
}

func ptr[T any](v T) *T { return &v }

func (f *fixture) offer(approval string, holdHours int, caps tally.Caps) tally.Offer {
	f.t.Helper()
	o, err := f.svc.Offers.CreateOffer(f.ctx, f.brandID, offers.OfferInput{
		Name: ptr("Shoes"), DestinationURL: ptr("https://shop.example/p?c={click_id}"),
		RevenueCents: ptr(int64(1000)), PayoutCents: ptr(int64(300)), Currency: ptr("USD"),
		Approval: ptr(approval), HoldHours: ptr(holdHours), Caps: &caps,
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return o
}

var partnerSeq atomic.Int64

// partner applies and, when active, approves a partner.
func (f *fixture) partner(active bool) tally.Partner {
	f.t.Helper()
	n := partnerSeq.Add(1)
	p, err := f.svc.Partners.Apply(f.ctx, f.brandID, partners.ApplicationInput{Name: ptr(fmt.Sprint("Partner ", n)), Email: ptr(fmt.Sprintf("p%d@example.com", n))})
	if err != nil {
		f.t.Fatal(err)
	}
	if active {
		if p, err = f.svc.Partners.ApprovePartner(f.ctx, f.brandID, p.ID); err != nil {
			f.t.Fatal(err)
		}
	}
	return p
}

func (f *fixture) convert(offerID, partnerID string, in conversions.ConversionInput) tally.Conversion {
	f.t.Helper()
	in.OfferID, in.PartnerID = &offerID, &partnerID
	c, created, err := f.svc.Conversions.RecordConversion(f.ctx, f.brandID, in)
	if err != nil || !created {
		f.t.Fatalf("record conversion: created=%v err=%v", created, err)
	}
	return c
}

// events returns all the brand's events with the given name, newest first.
func (f *fixture) events(name string) []tally.Event {
	f.t.Helper()
	var out []tally.Event
	p := records.ListParams{Limit: records.MaxLimit}
	for {
		page, next, err := f.svc.Events.Events(f.ctx, f.brandID, p)
		if err != nil {
			f.t.Fatal(err)
		}
		for _, e := range page {
			if name == "" || e.Event == name {
				out = append(out, e)
			}
		}
		if next == "" {
			return out
		}
		p.Cursor = next
	}
}

// allConversions pages through a filtered list to the end.
func (f *fixture) allConversions(filter conversions.ConversionFilter, limit int) []tally.Conversion {
	f.t.Helper()
	var out []tally.Conversion
	p := records.ListParams{Limit: limit}
	for {
		page, next, err := f.svc.Conversions.Conversions(f.ctx, f.brandID, filter, p)
		if err != nil {
			f.t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		p.Cursor = next
	}
}
