package dashboard_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// The Offers and Partners lists show each one's clicks, conversions,
// conversion rate, EPC and revenue over a period (the last 30 days unless
// chosen), and the Overview its top partners, at both widths.
func TestListsShowTheNumbers(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		boots := s.program(t, "Boots", "USD", 2)
		stiefel := s.program(t, "Stiefel", "EUR", 1)
		for i := range 4 {
			if _, _, err := s.svc.Clicks.RecordClick(context.Background(), clicks.ClickInput{OfferID: boots.offer.ID, PartnerID: boots.partner.ID,
				IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), UserAgent: "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"}); err != nil {
				t.Fatal(err)
			}
		}
		b := s.newTab(t)
		want := map[string]string{"clicks": "4", "conversions": "2", "rate": "50.0%", "epc": "6,250.00", "revenue": "25,000.00 USD"}
		cells := func(row string) map[string]string {
			got := map[string]string{}
			for col := range want {
				got[col] = b.Text(row + ` [data-col="` + col + `"]`)
			}
			return got
		}
		check := func(where, row string, want map[string]string) {
			t.Helper()
			got := cells(row)
			for col, v := range want {
				if got[col] != v {
					t.Errorf("%s: %s is %q, want %q", where, col, got[col], v)
				}
			}
		}
		for _, page := range []struct{ path, name, row, other string }{
			{"/dashboard/offers", "numbers-offers", `tr[data-offer="` + boots.offer.ID + `"]`, `tr[data-offer="` + stiefel.offer.ID + `"]`},
			{"/dashboard/partners", "numbers-partners", `tr[data-partner="` + boots.partner.ID + `"]`, `tr[data-partner="` + stiefel.partner.ID + `"]`},
			{"/dashboard", "numbers-overview", `.top-partners tr[data-partner="` + boots.partner.ID + `"]`, `.top-partners tr[data-partner="` + stiefel.partner.ID + `"]`},
		} {
			b.AtBothWidths(page.path, page.name, func(w int64) {
				check(page.path, page.row, want)
				check(page.path, page.other, map[string]string{"clicks": "0", "conversions": "1", "rate": "—", "revenue": "12,500.00 EUR"})
				if off := b.Offscreen("main td, main th"); len(off) > 0 {
					t.Errorf("%s at %d px: cells out of view: %v", page.path, w, off)
				}
				if sw := browsertest.Eval[float64](b, "document.documentElement.scrollWidth"); sw > float64(w) {
					t.Errorf("%s at %d px: the page is %v px wide", page.path, w, sw)
				}
			})
		}
		if first := browsertest.Eval[string](b, `document.querySelector(".top-partners tbody tr").dataset.partner`); first != boots.partner.ID {
			t.Errorf("the top partner is %s, want %s (the most revenue)", first, boots.partner.ID)
		}

		// Another period has other numbers; a wrong date says so in words.
		b.Open("/dashboard/offers?from=2001-01-01&to=2001-01-31")
		check("offers in January 2001", `tr[data-offer="`+boots.offer.ID+`"]`, map[string]string{"clicks": "0", "conversions": "0", "revenue": "—"})
		if v := browsertest.Eval[string](b, `document.querySelector("[data-period] [name=from]").value`); v != "2001-01-01" {
			t.Errorf("the period's form shows from %q", v)
		}
		if status := b.Open("/dashboard/partners?status=active&from=soon"); status != 422 {
			t.Errorf("partners from=soon: status %d, want 422", status)
		}
		if msg := b.Text("[role=alert]"); msg != "Enter the start date as a date, such as 2026-11-01." {
			t.Errorf("partners from=soon says %q", msg)
		}
		if !strings.Contains(b.Text("main table"), boots.partner.Name) {
			t.Errorf("the partners are not listed when the dates are wrong")
		}
	})
}
