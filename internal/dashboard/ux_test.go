package dashboard_test

// What a marketer expects of the pages (issue 22): paging both ways, the
// brand's time zone, search, copy buttons. Each in a browser.

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

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

// awaited is eval of a promise: its value once it resolves.
func awaited[T any](b *tab, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return v
}

// scripts switches the tab's JavaScript on or off (for the pages it loads
// from now on).
func (b *tab) scripts(on bool) {
	b.t.Helper()
	b.do("switch scripts", func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: !on})
		return chromedp.Void{}, err
	})
}

// allowClipboard lets the site's pages write and read the clipboard, as a
// person's click on a Copy button may.
func (b *tab) allowClipboard() {
	b.t.Helper()
	for _, name := range []string{"clipboard-write", "clipboard-read"} {
		b.do("allow "+name, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
				Permission: &cdpbrowser.PermissionDescriptor{Name: name}, Setting: cdpbrowser.PermissionSettingGranted, Origin: b.base})
			return chromedp.Void{}, err
		})
	}
}

// Tracking links, a new API key, a new webhook secret and the postback URL
// are plain text to select without JavaScript; with it, each has a Copy
// button that puts it on the clipboard and says so.
func TestCopyButtons(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		b := s.newTab(t)
		b.allowClipboard()
		copyable := `Array.from(document.querySelectorAll("[data-copy]")).map(e => [e.innerText.trim(), !!(e.nextElementSibling && e.nextElementSibling.matches("button.copy"))])`

		b.open("/dashboard/settings/keys")
		b.fill(`form[action="/dashboard/settings/keys"]`, map[string]string{"name": "Order system"})
		b.submit(`form[action="/dashboard/settings/keys"] button`, `^/dashboard/settings/keys$`)
		key := b.text("[data-new-key]")
		if !strings.HasPrefix(key, "tally_sk_") || !eval[bool](b, `!!document.querySelector("[data-new-key] + button.copy")`) {
			t.Errorf("the new key %q has no Copy button", key)
		}
		b.shot("copy-key-1280")
		b.do("copy the key", chromedp.Click(chromedp.CSS("[data-new-key] + button.copy")))
		if got := awaited[string](b, `new Promise(r => setTimeout(() => r(document.querySelector("[data-new-key] + button.copy").innerText), 100))`); got != "Copied" {
			t.Errorf("after a click the button says %q, want Copied", got)
		}
		if got := awaited[string](b, `navigator.clipboard.readText().catch(e => String(e))`); got != key {
			t.Errorf("the clipboard holds %q, want the key", got)
		}

		for _, page := range []struct{ path, sel string }{
			{"/dashboard/partners/" + d.partner.ID, "[data-tracking-link]"},
			{"/dashboard/settings/postback-token", "[data-postback-url]"},
		} {
			for _, js := range []bool{true, false} {
				b.scripts(js)
				b.atBothWidths(page.path, fmt.Sprintf("copy-%s-js-%v", strings.Trim(page.sel, "[]"), js), func(w int64) {
					got := eval[[][]any](b, copyable)
					if len(got) == 0 || got[0][0] == "" {
						t.Fatalf("%s: nothing to copy", page.path)
					}
					for _, v := range got {
						if v[1] != js {
							t.Errorf("%s at %d px with JavaScript %v: %q has a Copy button: %v", page.path, w, js, v[0], v[1])
						}
					}
					if off := b.offscreen("button.copy"); len(off) > 0 {
						t.Errorf("%s at %d px: Copy buttons out of view", page.path, w)
					}
				})
			}
			b.scripts(true)
		}
		if got := eval[string](b, `document.querySelector("[data-postback-url]").innerText`); !strings.Contains(got, "/postback?click_id=") {
			t.Errorf("the postback URL reads %q", got)
		}
	})
}
