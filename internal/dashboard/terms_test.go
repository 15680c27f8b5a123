package dashboard_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// Bad payout terms from the forms: a message in a marketer's words
// beside the field, and nothing changed.
func TestPayoutTermsFormsRefuseBadInput(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		c := client(t)
		s.signIn(c, "")
		ctx := context.Background()
		tok := token(t, s.get(c, "/dashboard/offers/"+d.offer.ID))
		to := "/dashboard/offers/" + d.offer.ID + "/terms"
		for _, tc := range []struct {
			form url.Values
			want string
		}{
			{url.Values{"partner": {d.partner.ID}, "payout": {"3.00"}, "payoutPercent": {"5"}}, "Fill in either a fixed amount or a share of revenue, not both."},
			{url.Values{"partner": {d.partner.ID}, "payoutKind": {"percent"}, "payoutPercent": {"12.555"}}, "Enter a share more than 0 and at most 100, with at most two decimals, such as 12.5."},
			{url.Values{"partner": {d.partner.ID}, "payoutKind": {"percent"}, "payoutPercent": {"100.01"}}, "Enter a share more than 0 and at most 100"},
			{url.Values{"partner": {d.partner.ID}, "payoutKind": {"percent"}, "payoutPercent": {"0"}}, "Enter a share more than 0 and at most 100"},
			{url.Values{"partner": {d.partner.ID}, "payoutKind": {"percent"}}, "Enter the share of revenue a conversion pays"},
			{url.Values{"partner": {d.partner.ID}, "payoutKind": {"fixed"}, "payout": {"three"}}, "Enter an amount such as 12.50."},
			{url.Values{"partner": {d.partner.ID}, "payoutKind": {"fixed"}}, "Enter the amount a conversion pays"},
			{url.Values{"payoutKind": {"fixed"}, "payout": {"2.00"}}, "Choose the partner these terms are for."},
		} {
			tc.form.Set("csrf", tok)
			got := s.post(c, to, tc.form)
			if got.status != 422 || !strings.Contains(got.body, tc.want) || strings.Contains(got.body, "payoutCents") {
				t.Errorf("%v: %d, want 422 with %q", tc.form, got.status, tc.want)
			}
			if all, _ := s.svc.Offers.AllTerms(ctx, s.brandID, d.offer.ID); len(all) != 0 {
				t.Fatalf("%v set terms: %+v", tc.form, all)
			}
		}
		// From the partner's page, an offer must be chosen.
		if got := s.post(c, "/dashboard/partners/"+d.partner.ID+"/terms", url.Values{"csrf": {tok}, "payoutKind": {"fixed"}, "payout": {"2.00"}}); got.status != 422 || !strings.Contains(got.body, "Choose the offer these terms are for.") {
			t.Errorf("no offer: %d", got.status)
		}
		// The offer form: the share chosen counts, the amount beside it
		// does not; a bad share is said in the same words.
		edit := url.Values{"csrf": {tok}, "name": {"Trail Shoes"}, "destinationUrl": {"https://shop.example/p?c={click_id}"}, "revenue": {"10.00"},
			"status": {"active"}, "approval": {"auto"}, "holdHours": {"0"}, "attributionWindowDays": {"30"}, "payoutKind": {"percent"}, "payout": {"3.00"}, "payoutPercent": {"150"}}
		if got := s.post(c, "/dashboard/offers/"+d.offer.ID, edit); got.status != 422 || !strings.Contains(got.body, "Enter a share more than 0 and at most 100") {
			t.Errorf("offer with 150%%: %d", got.status)
		}
		edit.Set("payoutPercent", "12.5")
		if got := s.post(c, "/dashboard/offers/"+d.offer.ID, edit); got.status != 303 {
			t.Fatalf("offer with 12.5%%: %d %s", got.status, got.body)
		}
		if o, _ := s.svc.Offers.Offer(ctx, s.brandID, d.offer.ID); o.PayoutPercent == nil || *o.PayoutPercent != 1250 || o.PayoutCents != 0 {
			t.Errorf("offer pays %d cents, %v", o.PayoutCents, o.PayoutPercent)
		}
		if got := s.get(c, "/dashboard/offers/"+d.offer.ID+"/edit"); !strings.Contains(got.body, `value="percent" checked`) || !strings.Contains(got.body, `value="12.5"`) {
			t.Error("the edit form does not show the share chosen")
		}
	})
}

// A marketer sets a partner's terms on the offer's page, sees them on the
// partner's page, and removes them there after confirming: at 1280 and
// 390 px, in a browser without a line of JavaScript of the dashboard's.
func TestPayoutTermsInTheBrowser(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		ctx := context.Background()
		b := s.newTab(t)
		reachable := func(page string) func(int64) {
			return func(w int64) {
				if off := b.Offscreen("[data-terms-form] button, [data-terms-form] input, [data-terms-form] select, [data-terms-list] button"); len(off) > 0 {
					t.Errorf("%s at %d px: out of reach: %v", page, w, off)
				}
			}
		}
		b.AtBothWidths("/dashboard/offers/"+d.offer.ID, "terms-offer-empty", reachable("offer page"))

		choose := func(kind string) {
			browsertest.Eval[bool](b, `(document.querySelector("[data-terms-form] input[name=payoutKind][value=`+kind+`]").checked = true)`)
		}
		b.Open("/dashboard/offers/" + d.offer.ID)
		b.Fill("[data-terms-form]", map[string]string{"partner": d.partner.ID, "payoutPercent": "12.555"})
		choose("percent")
		b.Submit("[data-terms-form] button", `^/dashboard/offers/`+d.offer.ID+`/terms$`)
		if e := b.Text("[data-terms-form] .field-error"); !strings.Contains(e, "at most two decimals") {
			t.Errorf("12.555%%: %q", e)
		}
		b.Width(390)
		b.Shot("terms-offer-error-390")
		b.Width(1280)
		if all, _ := s.svc.Offers.AllTerms(ctx, s.brandID, d.offer.ID); len(all) != 0 {
			t.Fatalf("a refused form set terms: %+v", all)
		}
		b.Fill("[data-terms-form]", map[string]string{"payoutPercent": "12.5"})
		b.Submit("[data-terms-form] button", `^/dashboard/offers/`+d.offer.ID+`$`)
		if got := b.Text(`[data-terms="` + d.partner.ID + `"]`); !strings.Contains(got, "Pat <i>Reviews</i>") || !strings.Contains(got, "12.5% of revenue") {
			t.Errorf("the offer's terms: %q", got)
		}
		b.AtBothWidths("/dashboard/offers/"+d.offer.ID, "terms-offer", reachable("offer page"))

		// Replaced from the partner's page, with a fixed amount.
		b.Open("/dashboard/partners/" + d.partner.ID)
		b.Fill("[data-terms-form]", map[string]string{"offer": d.offer.ID, "payout": "4.25"})
		choose("fixed")
		b.Submit("[data-terms-form] button", `^/dashboard/partners/`+d.partner.ID+`$`)
		if got := b.Text(`[data-terms="` + d.offer.ID + `"]`); !strings.Contains(got, "4.25 USD") || !strings.Contains(got, "instead of 3.00 USD") {
			t.Errorf("the partner's terms: %q", got)
		}
		b.AtBothWidths("/dashboard/partners/"+d.partner.ID, "terms-partner", reachable("partner page"))

		// Removing asks first; Cancel changes nothing, confirming removes.
		b.Submit(`[data-terms="`+d.offer.ID+`"] button`, `/terms/`+d.partner.ID+`/delete$`)
		if h := b.Text("[data-confirm] h1"); !strings.Contains(h, "Remove") {
			t.Errorf("confirmation heading: %q", h)
		}
		b.Width(390)
		b.Shot("terms-remove-confirm-390")
		if off := b.Offscreen("[data-confirm] button, [data-confirm] a"); len(off) > 0 {
			t.Errorf("the confirmation's buttons out of reach at 390 px: %v", off)
		}
		b.Width(1280)
		if all, _ := s.svc.Offers.AllTerms(ctx, s.brandID, d.offer.ID); len(all) != 1 {
			t.Fatalf("asking removed the terms: %+v", all)
		}
		b.Submit("[data-confirm] button", `^/dashboard/partners/`+d.partner.ID+`$`)
		if all, _ := s.svc.Offers.AllTerms(ctx, s.brandID, d.offer.ID); len(all) != 0 {
			t.Fatalf("terms left after removing: %+v", all)
		}
		if f := b.Text(".flash"); !strings.Contains(f, "The terms were removed") {
			t.Errorf("after removing: %q", f)
		}
		if got := b.Text("#terms + p + p"); !strings.Contains(got, "None") {
			t.Errorf("the partner's page after removing: %q", got)
		}
	})
}
