package dashboard_test

// What a marketer expects of the pages (issue 22): paging both ways, the
// brand's time zone, search, copy buttons. Each in a browser.

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
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
		b.Open("/dashboard/offers")
		rows := func() []string {
			return browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("tr[data-offer]")).map(r => r.dataset.offer)`)
		}
		links := func() (newer, older bool) {
			return browsertest.Eval[bool](b, `!!document.querySelector(".pager a[rel=prev]")`), browsertest.Eval[bool](b, `!!document.querySelector(".pager a[rel=next]")`)
		}
		var pages [][]string
		for i := range 3 {
			pages = append(pages, rows())
			newer, older := links()
			if newer != (i > 0) || older != (i < 2) {
				t.Errorf("page %d: Newer %v, Older %v", i+1, newer, older)
			}
			if i == 1 {
				b.AtBothWidths(browsertest.Eval[string](b, "location.pathname + location.search"), "pager", func(w int64) {
					if off := b.Offscreen(".pager a"); len(off) > 0 {
						t.Errorf("at %d px the pager's links are out of view: %v", w, off)
					}
				})
			}
			if i < 2 {
				b.Submit(".pager a[rel=next]", `^/dashboard/offers$`)
			}
		}
		if len(pages[0]) != 50 || len(pages[1]) != 50 || len(pages[2]) != 20 || pages[0][0] == pages[1][0] {
			t.Fatalf("pages of %d, %d and %d offers", len(pages[0]), len(pages[1]), len(pages[2]))
		}
		for i := 1; i >= 0; i-- {
			b.Submit(".pager a[rel=prev]", `^/dashboard/offers$`)
			if got := rows(); fmt.Sprint(got) != fmt.Sprint(pages[i]) {
				t.Errorf("Newer to page %d shows %d offers from %v, want those from %v", i+1, len(got), got[:1], pages[i][:1])
			}
		}
		if newer, _ := links(); newer {
			t.Error("back on the first page, there is a Newer link")
		}

		// With more offers than a search reads, it says order ids were
		// looked up in the newest only.
		b.Open("/dashboard/search?q=order-nowhere")
		if !strings.Contains(b.Text("[data-offers-bounded]"), "newest 100 offers") {
			t.Errorf("a search among 120 offers does not say it read the newest 100: %q", b.Text("main"))
		}
	})
}

// Tracking links, a new API key, a new webhook secret and the postback URL
// are plain text to select without JavaScript; with it, each has a Copy
// button that puts it on the clipboard and says so.
func TestCopyButtons(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		b := s.newTab(t)
		b.AllowClipboard()
		copyable := `Array.from(document.querySelectorAll("[data-copy]")).map(e => [e.innerText.trim(), !!(e.nextElementSibling && e.nextElementSibling.matches("button.copy"))])`

		b.Open("/dashboard/settings/keys")
		b.Fill(`form[action="/dashboard/settings/keys"]`, map[string]string{"name": "Order system"})
		b.Submit(`form[action="/dashboard/settings/keys"] button`, `^/dashboard/settings/keys$`)
		key := b.Text("[data-new-key]")
		if !strings.HasPrefix(key, "tally_sk_") || !browsertest.Eval[bool](b, `!!document.querySelector("[data-new-key] + button.copy")`) {
			t.Errorf("the new key %q has no Copy button", key)
		}
		b.Shot("copy-key-1280")
		b.Do("copy the key", chromedp.Click(chromedp.CSS("[data-new-key] + button.copy")))
		if got := browsertest.Awaited[string](b, `new Promise(r => setTimeout(() => r(document.querySelector("[data-new-key] + button.copy").innerText), 100))`); got != "Copied" {
			t.Errorf("after a click the button says %q, want Copied", got)
		}
		if got := browsertest.Awaited[string](b, `navigator.clipboard.readText().catch(e => String(e))`); got != key {
			t.Errorf("the clipboard holds %q, want the key", got)
		}

		for _, page := range []struct{ path, sel string }{
			{"/dashboard/partners/" + d.partner.ID, "[data-tracking-link]"},
			{"/dashboard/settings/postback-token", "[data-postback-url]"},
		} {
			for _, js := range []bool{true, false} {
				b.Scripts(js)
				b.AtBothWidths(page.path, fmt.Sprintf("copy-%s-js-%v", strings.Trim(page.sel, "[]"), js), func(w int64) {
					got := browsertest.Eval[[][]any](b, copyable)
					if len(got) == 0 || got[0][0] == "" {
						t.Fatalf("%s: nothing to copy", page.path)
					}
					for _, v := range got {
						if v[1] != js {
							t.Errorf("%s at %d px with JavaScript %v: %q has a Copy button: %v", page.path, w, js, v[0], v[1])
						}
					}
					if off := b.Offscreen("button.copy"); len(off) > 0 {
						t.Errorf("%s at %d px: Copy buttons out of view", page.path, w)
					}
				})
			}
			b.Scripts(true)
		}
		if got := browsertest.Eval[string](b, `document.querySelector("[data-postback-url]").innerText`); !strings.Contains(got, "/postback?click_id=") {
			t.Errorf("the postback URL reads %q", got)
		}
	})
}

// A brand in Auckland picks its zone from a list in Settings → General;
// from then on a conversion at 00:30 there counts on that day, not on the
// UTC day before: on the overview, in the date presets, in reports and in
// the times the pages write.
func TestBrandTimeZone(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		// 23:30 on 20 November in Auckland (NZDT, UTC+13), then 00:30 on the 21st.
		clock := testenv.NewClock(time.Date(2026, 11, 20, 10, 30, 0, 0, time.UTC))
		s := newSite(t, st, httpapi.Config{}, service.WithClock(clock.Now))
		p := s.program(t, "Boots", "USD", 0)
		record := func(txn string) tally.Conversion {
			c, _, err := s.svc.Conversions.RecordConversion(ctx, s.brandID, conversions.ConversionInput{OfferID: &p.offer.ID, PartnerID: &p.partner.ID, ExternalTxnID: ptr(txn)})
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		record("late-on-the-20th")
		clock.Set(time.Date(2026, 11, 20, 11, 30, 0, 0, time.UTC))
		early := record("early-on-the-21st")
		clock.Set(time.Date(2026, 11, 20, 11, 40, 0, 0, time.UTC))

		b := s.newTab(t)
		if got := b.Text("main p.muted"); got != "Today is 2026-11-20 (UTC)." {
			t.Errorf("before choosing a zone the overview says %q", got)
		}
		b.Open("/dashboard/settings")
		if tag := browsertest.Eval[string](b, `document.querySelector("[name=timezone]").tagName`); tag != "SELECT" {
			t.Fatalf("the time zone is a %s, want a list", tag)
		}
		if v := browsertest.Eval[string](b, `document.querySelector("[name=timezone]").value`); v != "UTC" {
			t.Errorf("a new brand's zone is %q, want UTC", v)
		}
		b.Fill("form[data-general]", map[string]string{"timezone": "Nowhere/Atlantis"})
		b.Submit("form[data-general] button", `^/dashboard/settings/general$`)
		if got := b.Text("#timezone-error"); got != "Choose a time zone from the list." {
			t.Errorf("a zone not on the list: %q", got)
		}
		b.Fill("form[data-general]", map[string]string{"timezone": "Pacific/Auckland"})
		b.Submit("form[data-general] button", `^/dashboard/settings/general$`)
		if f := b.Text(".flash"); !strings.HasPrefix(f, "The time zone was saved.") {
			t.Errorf("after saving: %q", f)
		}
		b.AtBothWidths("/dashboard/settings/general", "settings-general", func(w int64) {
			if v := browsertest.Eval[string](b, `document.querySelector("[name=timezone]").value`); v != "Pacific/Auckland" {
				t.Errorf("the saved zone shows as %q", v)
			}
			if off := b.Offscreen("main select, main button, main nav.tabs a"); len(off) > 0 {
				t.Errorf("at %d px out of view: %v", w, off)
			}
		})
		if b, _ := s.svc.Identity.Brand(ctx, s.brandID); b.Timezone != "Pacific/Auckland" {
			t.Errorf("the brand's zone is %q", b.Timezone)
		}

		b.AtBothWidths("/dashboard", "timezone-overview", func(int64) {})
		if got := b.Text("main p.muted"); got != "Today is 2026-11-21 (Pacific/Auckland)." {
			t.Errorf("the overview says %q", got)
		}
		if got := b.Text(`[data-stat="conversions"]`); !strings.HasPrefix(got, "1") {
			t.Errorf("conversions today in Auckland: %q, want 1 (the other was on the 20th there)", got)
		}

		b.Open("/dashboard/conversions")
		b.Submit(`nav.presets a[href*="from=2026-11-21&"][href*="to=2026-11-21"]`, `^/dashboard/conversions$`)
		got := browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("tr[data-conversion]")).map(r => r.dataset.conversion + " " + r.querySelector("td").innerText)`)
		if want := early.ID + " 2026-11-21 00:30 NZDT"; len(got) != 1 || got[0] != want {
			t.Errorf("today's conversions in Auckland: %q, want [%s]", got, want)
		}

		b.AtBothWidths("/dashboard/reports", "timezone-report", func(int64) {})
		if v := browsertest.Eval[string](b, `document.querySelector("[name=timezone]").value`); v != "Pacific/Auckland" {
			t.Errorf("the report's zone is %q, want the brand's", v)
		}
		days := browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("main tbody tr")).filter(r => r.querySelector("[data-col=conversions]").innerText.trim()[0] !== "0").map(r => r.cells[0].innerText + ": " + r.querySelector("[data-col=conversions]").innerText.split("\n")[0])`)
		if fmt.Sprint(days) != "[2026-11-20: 1 2026-11-21: 1]" {
			t.Errorf("the report's days with conversions: %q", days)
		}
	})
}

// The search box in the header finds a conversion by its order id or id,
// a click by its id, and partners by a part of their name; one match opens
// its page, several are listed, none says so. Another brand's records are
// never found, even under the same order id.
func TestSearch(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		patricia, err := s.svc.Partners.Apply(ctx, s.brandID, partners.ApplicationInput{Name: ptr("Patricia Deals"), Email: ptr("deals@patricia.example")})
		if err != nil {
			t.Fatal(err)
		}
		brands, _, err := s.svc.Identity.Brands(ctx, records.ListParams{})
		if err != nil {
			t.Fatal(err)
		}
		other := ""
		for _, b := range brands {
			if b.ID != s.brandID {
				other = b.ID
			}
		}
		otherClick := path.Base(d.otherIDs[3])
		for _, txn := range []string{"order-1", "other-order"} { // the same order id as this brand's, and one of its own
			if _, _, err := s.svc.Conversions.RecordConversion(ctx, other, conversions.ConversionInput{ClickID: &otherClick, ExternalTxnID: ptr(txn)}); err != nil {
				t.Fatal(err)
			}
		}

		b := s.newTab(t)
		searchFor := func(q, pathRE string) {
			t.Helper()
			b.Fill("header form.search", map[string]string{"q": q})
			b.Leave("search for "+q, chromedp.SendKeys("header form.search input", "\r"), pathRE)
		}
		for _, tc := range []struct{ q, to string }{
			{"order-1", "/dashboard/conversions/" + d.conv.ID},
			{d.conv.ID, "/dashboard/conversions/" + d.conv.ID},
			{d.click.ID, "/dashboard/clicks/" + d.click.ID},
			{"  REVIEWS ", "/dashboard/partners/" + d.partner.ID},
		} {
			b.Open("/dashboard")
			searchFor(tc.q, "^"+tc.to+"$")
		}

		b.Open("/dashboard/offers")
		searchFor("pat", `^/dashboard/search$`)
		got := browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("tr[data-result]")).map(r => r.dataset.result)`)
		if len(got) != 2 || !slices.Contains(got, d.partner.ID) || !slices.Contains(got, patricia.ID) {
			t.Errorf("pat finds %v, want this brand's two partners %s and %s", got, d.partner.ID, patricia.ID)
		}
		b.AtBothWidths("/dashboard/search?q=pat", "search-results", func(w int64) {
			if off := b.Offscreen("header form.search input, main td, main th"); len(off) > 0 {
				t.Errorf("at %d px out of view: %v", w, off)
			}
		})

		for _, q := range []string{"other-order", otherClick, path.Base(d.otherIDs[2]), "nobody-at-all"} {
			b.Open("/dashboard/search?q=" + url.QueryEscape(q))
			if got := browsertest.Eval[string](b, "location.pathname"); got != "/dashboard/search" {
				t.Errorf("%s opens %s", q, got)
			}
			if msg := b.Text("[data-no-results]"); !strings.HasPrefix(msg, "Nothing matches “"+q+"”.") {
				t.Errorf("%s: %q", q, msg)
			}
		}
		b.Shot("search-none-1280")
	})
}
