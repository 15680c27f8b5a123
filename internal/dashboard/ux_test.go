package dashboard_test

// What a marketer expects of the pages (issue 22): paging both ways, the
// brand's time zone, search, copy buttons. Each in a browser.

import (
	"context"
	"fmt"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// A list of 120 offers pages forward twice with Older and back twice with
// Newer, each page showing exactly the offers it showed before; the first
// page has no Newer and the last no Older.
func TestPagerGoesBothWays(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		for i := range 120 {
			if _, err := s.svc.Offers.CreateOffer(context.Background(), s.brandID, offers.OfferInput{Name: ptr(fmt.Sprintf("Offer %03d", i)),
				DestinationURL: ptr("https://shop.example/"), RevenueCents: ptr[int64](1000), PayoutCents: ptr[int64](100), Currency: ptr("USD")}); err != nil {
				t.Fatal(err)
			}
		}
		b := s.newTab(t)
		b.open("/dashboard/offers")
		rows := func() []string {
			return eval[[]string](b, `Array.from(document.querySelectorAll("tr[data-offer]")).map(r => r.dataset.offer)`)
		}
		links := func() (newer, older bool) {
			return eval[bool](b, `!!document.querySelector(".pager a[rel=prev]")`), eval[bool](b, `!!document.querySelector(".pager a[rel=next]")`)
		}
		var pages [][]string
		for i := range 3 {
			pages = append(pages, rows())
			newer, older := links()
			if newer != (i > 0) || older != (i < 2) {
				t.Errorf("page %d: Newer %v, Older %v", i+1, newer, older)
			}
			if i == 1 {
				b.atBothWidths(eval[string](b, "location.pathname + location.search"), "pager", func(w int64) {
					if off := b.offscreen(".pager a"); len(off) > 0 {
						t.Errorf("at %d px the pager's links are out of view: %v", w, off)
					}
				})
			}
			if i < 2 {
				b.submit(".pager a[rel=next]", `^/dashboard/offers$`)
			}
		}
		if len(pages[0]) != 50 || len(pages[1]) != 50 || len(pages[2]) != 20 || pages[0][0] == pages[1][0] {
			t.Fatalf("pages of %d, %d and %d offers", len(pages[0]), len(pages[1]), len(pages[2]))
		}
		for i := 1; i >= 0; i-- {
			b.submit(".pager a[rel=prev]", `^/dashboard/offers$`)
			if got := rows(); fmt.Sprint(got) != fmt.Sprint(pages[i]) {
				t.Errorf("Newer to page %d shows %d offers from %v, want those from %v", i+1, len(got), got[:1], pages[i][:1])
			}
		}
		if newer, _ := links(); newer {
			t.Error("back on the first page, there is a Newer link")
		}
	})
}
