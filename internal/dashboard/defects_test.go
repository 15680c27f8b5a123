package dashboard_test

// Defects a marketer met in the pages (issue 22), each tested in a browser
// as that marketer would meet it.

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// program is an offer with manual approval in a currency, an active
// partner, and n pending conversions of theirs.
type program struct {
	offer   tally.Offer
	partner tally.Partner
	convs   []tally.Conversion
}

func (s *site) program(t testing.TB, name, currency string, n int) program {
	t.Helper()
	ctx := context.Background()
	var p program
	var err error
	p.offer, err = s.svc.Offers.CreateOffer(ctx, s.brandID, offers.OfferInput{Name: ptr(name), DestinationURL: ptr("https://shop.example/" + currency),
		RevenueCents: ptr[int64](1250000), PayoutCents: ptr[int64](300000), Currency: ptr(currency), Approval: ptr(tally.ApprovalManual)})
	if err != nil {
		t.Fatal(err)
	}
	p.partner, err = s.svc.Partners.Apply(ctx, s.brandID, partners.ApplicationInput{Name: ptr(name + " Partner"), Email: ptr(strings.ToLower(currency) + "@partner.example")})
	if err == nil {
		p.partner, err = s.svc.Partners.ApprovePartner(ctx, s.brandID, p.partner.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		c, _, err := s.svc.Conversions.RecordConversion(ctx, s.brandID, conversions.ConversionInput{OfferID: &p.offer.ID, PartnerID: &p.partner.ID,
			ExternalTxnID: ptr(fmt.Sprintf("%s-order-%d", currency, i))})
		if err != nil {
			t.Fatal(err)
		}
		p.convs = append(p.convs, c)
	}
	return p
}

// Defect 1: after approving one conversion and rejecting another on the
// list, the notice says the last thing done, not the first.
func TestNoticeSaysTheLastAction(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		p := s.program(t, "Boots", "USD", 2)
		b := s.newTab(t)
		b.Open("/dashboard/conversions?status=pending")
		b.Submit(`tr[data-conversion="`+p.convs[0].ID+`"] form[action$="/approve"] button`, `^/dashboard/conversions$`)
		if f := b.Text(".flash"); f != "The conversion was approved." {
			t.Errorf("after approving: %q", f)
		}
		b.Submit(`tr[data-conversion="`+p.convs[1].ID+`"] form[action$="/reject"] button`, `^/dashboard/conversions`)
		if browsertest.Eval[bool](b, `!!document.querySelector("[data-confirm]")`) {
			b.Submit(`[data-confirm] form button`, `^/dashboard/conversions$`)
		}
		if f := b.Text(".flash"); f != "The conversion was rejected." {
			t.Errorf("after approving one conversion and rejecting another the notice says %q", f)
		}
		if q := browsertest.Eval[string](b, "location.search"); strings.Count(q, "done=") != 1 {
			t.Errorf("the page's address carries notices %q", q)
		}
	})
}

// Defect 3: ban, reject (a partner's application, a conversion), revoke a
// key and delete a webhook ask first (the pages have no JavaScript); Cancel changes
// nothing, and the confirming button does what was asked.
func TestIrreversibleActionsAskFirst(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSite(t, st, httpapi.Config{})
		p := s.program(t, "Boots", "USD", 1)
		applicant, err := s.svc.Partners.Apply(ctx, s.brandID, partners.ApplicationInput{Name: ptr("Sam Applies"), Email: ptr("sam@applies.example")})
		if err != nil {
			t.Fatal(err)
		}
		key, err := s.svc.Identity.CreateKey(ctx, s.brandID, identity.APIKeyInput{Name: ptr("Order system")})
		if err != nil {
			t.Fatal(err)
		}
		sub, err := s.svc.Endpoints.CreateSubscription(ctx, s.brandID, endpoints.SubscriptionInput{URL: ptr("https://hooks.example.com/tally"),
			Events: []string{tally.EventConversionCreated}})
		if err != nil {
			t.Fatal(err)
		}
		b := s.newTab(t)

		for _, tc := range []struct {
			name, page, button, cancelTo string
			state                        func() string // the thing's state now
			before, after                string
		}{
			{"ban", "/dashboard/partners", `tr[data-partner="` + p.partner.ID + `"] form[action$="/ban"] button`, "/dashboard/partners",
				func() string { x, _ := s.svc.Partners.Partner(ctx, s.brandID, p.partner.ID); return x.Status }, "active", "banned"},
			{"reject-partner", "/dashboard/partners?status=applied", `tr[data-partner="` + applicant.ID + `"] form[action$="/reject"] button`, "/dashboard/partners?status=applied",
				func() string { x, _ := s.svc.Partners.Partner(ctx, s.brandID, applicant.ID); return x.Status }, "applied", "rejected"},
			{"reject-conversion", "/dashboard/conversions/" + p.convs[0].ID, `form[action$="/reject"] button`, "/dashboard/conversions/" + p.convs[0].ID,
				func() string { x, _ := s.svc.Conversions.Conversion(ctx, s.brandID, p.convs[0].ID); return x.Status }, "pending", "rejected"},
			{"revoke-key", "/dashboard/settings/keys", `tr[data-key="` + key.ID + `"] form button`, "/dashboard/settings/keys",
				func() string {
					keys, _, _ := s.svc.Identity.ActiveAPIKeys(ctx, s.brandID, records.ListParams{})
					return fmt.Sprint(len(keys), " active")
				}, "1 active", "0 active"},
			{"delete-webhook", "/dashboard/webhooks/" + sub.ID, `form[action$="/delete"] button`, "/dashboard/webhooks/" + sub.ID,
				func() string {
					if _, err := s.svc.Endpoints.Subscription(ctx, s.brandID, sub.ID); err != nil {
						return tally.ErrorCode(err)
					}
					return "kept"
				}, "kept", tally.ECodeNotFound},
		} {
			b.Open(tc.page)
			b.Submit(tc.button, `.`)
			if !browsertest.Eval[bool](b, `!!document.querySelector("[data-confirm]")`) {
				t.Errorf("%s: no confirmation; the page is %s", tc.name, browsertest.Eval[string](b, "location.pathname"))
			}
			if got := tc.state(); got != tc.before {
				t.Errorf("%s: %q after the first click, want %q until confirmed", tc.name, got, tc.before)
				continue
			}
			b.Shot("confirm-" + tc.name + "-1280")
			if tc.name == "ban" {
				b.Width(390)
				b.Shot("confirm-ban-390")
				if off := b.Offscreen("[data-confirm] button, [data-cancel]"); len(off) > 0 {
					t.Errorf("the confirmation's buttons out of reach at 390 px: %v", off)
				}
				b.Width(1280)
			}
			if href := browsertest.Eval[string](b, `document.querySelector("[data-cancel]").getAttribute("href")`); href != tc.cancelTo {
				t.Errorf("%s: Cancel goes to %q, want %q", tc.name, href, tc.cancelTo)
			}
			b.Submit(`[data-confirm] form button`, `.`)
			if got := tc.state(); got != tc.after {
				t.Errorf("%s: %q after confirming, want %q", tc.name, got, tc.after)
			}
		}
	})
}

// Defect 4: at 390 px every navigation link is in view, and the actions
// of the Partners, Conversions and Reports rows can be reached.
func TestPhoneReachesEverything(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		s.fill(t)
		s.program(t, "Boots", "USD", 2)
		if _, err := s.svc.Partners.Apply(context.Background(), s.brandID, partners.ApplicationInput{Name: ptr("Sam Applies"), Email: ptr("sam@applies.example")}); err != nil {
			t.Fatal(err)
		}
		b := s.newTab(t)
		for name, path := range map[string]string{
			"phone-partners": "/dashboard/partners", "phone-conversions": "/dashboard/conversions",
			"phone-reports": "/dashboard/reports?time=day&offer=1&partner=1",
		} {
			b.AtBothWidths(path, name, func(w int64) {
				if off := b.Offscreen("header nav a, main nav.tabs a"); len(off) > 0 {
					t.Errorf("%s at %d px: navigation links out of view: %v", path, w, off)
				}
				if off := b.Offscreen("main td button, main td, main th"); len(off) > 0 {
					t.Errorf("%s at %d px: cells or actions out of view: %v", path, w, off)
				}
				if sw := browsertest.Eval[float64](b, "document.documentElement.scrollWidth"); sw > float64(w) {
					t.Errorf("%s at %d px: the page is %v px wide", path, w, sw)
				}
			})
		}
	})
}

// axisCheck lists the charts' axis labels that are cut off by their chart
// or too small to read.
const axisCheck = `Array.from(document.querySelectorAll("figure.chart svg")).flatMap(svg => {
	const box = svg.getBoundingClientRect();
	return Array.from(svg.querySelectorAll("text.axis")).filter(t => {
		const r = t.getBoundingClientRect();
		return r.left < box.left - 0.5 || r.right > box.right + 0.5 || r.height < 9;
	}).map(t => svg.getAttribute("aria-label") + ": " + t.textContent);
})`

// Defect 2: the money charts' values are whole and readable at both widths,
// and each currency has charts of its own.
func TestChartsShowEveryCurrencyInFull(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		s.program(t, "Boots", "USD", 2)
		s.program(t, "Stiefel", "EUR", 1)
		b := s.newTab(t)
		b.AtBothWidths("/dashboard", "charts-overview", func(w int64) {
			if cut := browsertest.Eval[[]string](b, axisCheck); len(cut) > 0 {
				t.Errorf("at %d px these axis labels are cut off or too small: %v", w, cut)
			}
		})
		titles := browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("figure.chart figcaption")).map(f => f.innerText)`)
		for _, want := range []string{"Revenue per day (USD)", "Payout per day (USD)", "Revenue per day (EUR)", "Payout per day (EUR)"} {
			if !strings.Contains(strings.Join(titles, "|"), want) {
				t.Errorf("no chart %q among %q", want, titles)
			}
		}
	})
}

// Defect 5: a report by day, offer and partner fits 1280 px with every
// column, a totals row per currency, rates, and a list of time zones.
func TestReportHasTotalsAndFits(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		s.fill(t)
		s.program(t, "Boots", "USD", 2)
		s.program(t, "Stiefel", "EUR", 1)
		b := s.newTab(t)
		b.AtBothWidths("/dashboard/reports?time=day&offer=1&partner=1", "report-totals", func(w int64) {
			if off := b.Offscreen("main th, main td"); len(off) > 0 {
				t.Errorf("at %d px these cells are out of view: %v", w, off)
			}
		})
		if got := b.Text(`tr[data-total="USD"] [data-col="revenue"]`); got != "25,010.00" {
			t.Errorf("the USD total's revenue is %q, want 25,010.00", got)
		}
		if got := b.Text(`tr[data-total="EUR"] [data-col="conversions"]`); !strings.HasPrefix(got, "1") {
			t.Errorf("the EUR total's conversions: %q", got)
		}
		if got := b.Text(`tr[data-total="USD"] [data-col="rate"]`); got != "300.0%" {
			t.Errorf("the USD total's conversion rate is %q, want 300.0%% (3 conversions of 1 click)", got)
		}
		if tag := browsertest.Eval[string](b, `document.querySelector("[name=timezone]").tagName`); tag != "SELECT" {
			t.Errorf("the time zone is a %s, want a list to choose from", tag)
		}
	})
}

// Defect 6: a page of 50 clicks with full User-Agents stays a few screens
// tall, and a min score that is no number is refused in words.
func TestClicksListIsCompact(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		long := "Mozilla/5.0 (Linux; Android 14; Pixel 8 Pro Build/AP2A.240805.005; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/127.0.6533.103 Mobile Safari/537.36 [FB_IAB/FB4A;FBAV/475.0.0.43.108;IABMV/1;]"
		for i := range 50 {
			if _, _, err := s.svc.Clicks.RecordClick(context.Background(), clicks.ClickInput{OfferID: d.offer.ID, PartnerID: d.partner.ID,
				IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), UserAgent: long}); err != nil {
				t.Fatal(err)
			}
		}
		b := s.newTab(t)
		b.Open("/dashboard/clicks")
		b.Shot("clicks-50-1280")
		rows := browsertest.Eval[float64](b, `document.querySelectorAll("tr[data-click]").length`)
		height := browsertest.Eval[float64](b, `document.querySelector("main table").getBoundingClientRect().height`)
		if rows != 50 || height/rows > 70 {
			t.Errorf("%v clicks take %v px (%.0f px a row); want at most 70 px a row", rows, height, height/rows)
		}
		if title := browsertest.Eval[string](b, `document.querySelector("[data-ua]").title`); title != long {
			t.Errorf("the whole User-Agent is not at hand: %q", title)
		}
		b.Do("type a min score", chromedp.SendKeys(`input[name="minScore"]`, "abc"))
		b.Submit(`form.filters button`, `^/dashboard/clicks$`)
		if msg := b.Text("#filter-error"); msg != "Min score must be a whole number from 0 to 100." {
			t.Errorf("min score abc: %q", msg)
		}
		b.Shot("clicks-bad-score-1280")
	})
}

// Defect 8: a filter's mistake reads in the words of the form, and empty
// pages say what to do, not which API to call.
func TestMessagesInMarketersWords(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		b := s.newTab(t)
		for path, want := range map[string]string{
			"/dashboard/reports?from=2026-11-20&to=2026-11-01":     "The start date is after the end date.",
			"/dashboard/conversions?from=2026-11-20&to=2026-11-01": "The start date is after the end date.",
			"/dashboard/clicks?from=2026-11-20&to=2026-11-01":      "The start date is after the end date.",
			"/dashboard/reports?from=soon":                         "Enter the start date as a date, such as 2026-11-01.",
			"/dashboard/clicks?minScore=abc":                       "Min score must be a whole number from 0 to 100.",
		} {
			if status := b.Open(path); status != 422 {
				t.Errorf("%s: status %d, want 422", path, status)
			}
			if got := b.Text("[role=alert]"); got != want {
				t.Errorf("%s says %q, want %q", path, got, want)
			}
		}
		b.Shot("messages-report-dates-1280")
		for _, path := range []string{"/dashboard", "/dashboard/clicks", "/dashboard/conversions"} {
			b.Open(path)
			if text := b.Text("main"); strings.Contains(text, "/api/") || strings.Contains(text, "{offerId}") {
				t.Errorf("%s speaks API: %q", path, text)
			}
		}
	})
}
