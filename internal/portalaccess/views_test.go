package portalaccess_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func (w *world) views() *portalaccess.Views {
	s := w.svc
	return portalaccess.NewViews(portalaccess.Sources{Offers: s.Offers, Reports: s.Reports, Conversions: s.Conversions,
		Payouts: s.Payouts, Postbacks: s.Endpoints, Deliveries: s.Deliveries})
}

func (w *world) offer(brandID, name, status string) tally.Offer {
	o, err := w.svc.Offers.CreateOffer(context.Background(), brandID, offers.OfferInput{Name: ptr(name),
		DestinationURL: ptr("https://shop.example/?c={click_id}"), RevenueCents: ptr(int64(98765)), PayoutCents: ptr(int64(500)),
		Currency: ptr("USD"), Status: ptr(status)})
	if err != nil {
		w.t.Fatal(err)
	}
	return o
}

// signedIn invites p and accepts, returning its session.
func (w *world) signedIn(p tally.Partner) portalaccess.Session {
	_, sess, err := w.svc.Portal.AcceptInvite(context.Background(), w.invite(p), pw)
	if err != nil {
		w.t.Fatal(err)
	}
	return sess
}

func TestViewsShowThePartnerItsOwnAndNoRevenue(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		w := newWorld(t, st)
		brand := w.brand("Acme")
		ann, bob := w.partner(brand, "ann@example.com", true), w.partner(brand, "bob@example.com", true)
		live, paused := w.offer(brand, "Running shoes", tally.OfferActive), w.offer(brand, "Old boots", tally.OfferPaused)
		if _, err := w.svc.Offers.PutTerms(ctx, brand, live.ID, ann.ID, offers.TermsInput{PayoutPercent: ptr(json.Number("12.5"))}); err != nil {
			t.Fatal(err)
		}
		for range 4 {
			if _, _, err := w.svc.Clicks.RecordClick(ctx, clicks.ClickInput{OfferID: live.ID, PartnerID: ann.ID, IP: netip.MustParseAddr("203.0.113.9"), UserAgent: "Mozilla/5.0"}); err != nil {
				t.Fatal(err)
			}
		}
		convert := func(p tally.Partner, sub1 string) tally.Conversion {
			c, _, err := w.svc.Conversions.RecordConversion(ctx, brand, conversions.ConversionInput{OfferID: &live.ID, PartnerID: &p.ID, Sub1: ptr(sub1)})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		mine := []tally.Conversion{convert(ann, "spring"), convert(ann, "summer")}
		convert(bob, "other")
		w.clock.Advance(time.Minute)
		if _, err := w.svc.Payouts.CreatePayout(ctx, brand, payouts.CreateInput{Currency: ptr("USD")}); err != nil {
			t.Fatal(err)
		}

		sess := w.signedIn(ann)
		v := w.views()
		o, err := v.Overview(ctx, sess)
		if err != nil {
			t.Fatal(err)
		}
		// 12.5% of 987.65 is 123.46 a conversion; two over four clicks.
		want := portalaccess.Stats{Currency: "USD", Clicks: 4, Conversions: 2, Approved: 2, EarnedCents: 24692, EPCCents: 6173}
		if len(o.Stats) != 1 || o.Stats[0] != want {
			t.Errorf("overview stats %+v, want %+v", o.Stats, want)
		}
		if len(o.Balances) != 1 || o.Balances[0].InPayoutCents != 24692 {
			t.Errorf("overview balances %+v", o.Balances)
		}

		links, err := v.Links(ctx, sess)
		if err != nil {
			t.Fatal(err)
		}
		if len(links) != 1 || links[0].OfferID != live.ID || links[0].PayoutPercent == nil || *links[0].PayoutPercent != 1250 ||
			links[0].Path != "/c/"+live.ID+"?pid="+ann.ID {
			t.Errorf("links %+v, want the active offer's only, with Ann's terms (not %s)", links, paused.ID)
		}
		if got := portalaccess.TrackingPath(live.ID, ann.ID, [5]string{"a b", "", "x&y"}); got != "/c/"+live.ID+"?pid="+ann.ID+"&sub1=a+b&sub3=x%26y" {
			t.Errorf("tracking path with subs: %s", got)
		}

		list, next, err := v.Conversions(ctx, sess, "", records.ListParams{Limit: 1})
		if err != nil || len(list) != 1 || list[0].ID != mine[1].ID || next == "" {
			t.Fatalf("first page of conversions: %+v %q %v", list, next, err)
		}
		rest, _, err := v.Conversions(ctx, sess, "", records.ListParams{Limit: 10, Cursor: next})
		if err != nil || len(rest) != 1 || rest[0].ID != mine[0].ID || rest[0].OfferName != "Running shoes" || rest[0].PayoutCents != 12346 || rest[0].Sub1 != "spring" {
			t.Errorf("second page of conversions: %+v, %v", rest, err)
		}
		lines, _, err := v.Payouts(ctx, sess, records.ListParams{})
		if err != nil || len(lines) != 1 || lines[0].AmountCents != 24692 || lines[0].Conversions != 2 {
			t.Errorf("payout lines %+v, %v", lines, err)
		}
		// Nothing a view answers has a place for the brand's revenue.
		for _, answer := range []any{o, links, list, rest, lines} {
			b, _ := json.Marshal(answer)
			if strings.Contains(string(b), "98765") || strings.Contains(strings.ToLower(string(b)), "revenue") {
				t.Errorf("a view shows revenue: %s", b)
			}
		}

		// Bob's session sees Bob's only.
		bobs, _, err := v.Conversions(ctx, w.signedIn(bob), "", records.ListParams{})
		if err != nil || len(bobs) != 1 || bobs[0].Sub1 != "other" {
			t.Errorf("Bob's conversions %+v, %v", bobs, err)
		}
	})
}
