package dashboard_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// Reports and the lists with dates offer today, 7 days, this month and last
// month as plain links (no JavaScript), which keep the page's other filters.
func TestDatePresets(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		s.program(t, "Boots", "USD", 1)
		now := s.svc.DB.Now().UTC()
		first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		today := now.Format(time.DateOnly)
		ranges := map[string][2]string{
			"Today":      {today, today},
			"7 days":     {now.AddDate(0, 0, -6).Format(time.DateOnly), today},
			"This month": {first.Format(time.DateOnly), today},
			"Last month": {first.AddDate(0, -1, 0).Format(time.DateOnly), first.AddDate(0, 0, -1).Format(time.DateOnly)},
		}
		b := s.newTab(t)
		for _, page := range []struct{ path, name, keep string }{
			{"/dashboard/reports", "presets-reports", "time"},
			{"/dashboard/offers", "presets-offers", ""},
			{"/dashboard/partners?status=active", "presets-partners", "status"},
			{"/dashboard/conversions?status=pending", "presets-conversions", "status"},
			{"/dashboard/clicks", "presets-clicks", ""},
		} {
			b.AtBothWidths(page.path, page.name, func(w int64) {
				if off := b.Offscreen("nav.presets a"); len(off) > 0 {
					t.Errorf("%s at %d px: presets out of view: %v", page.path, w, off)
				}
			})
			for label, want := range ranges {
				b.Open(page.path)
				b.Submit(`nav.presets a[href*="from=`+want[0]+`&"][href*="to=`+want[1]+`"]`, `^/dashboard/`)
				q, err := url.ParseQuery(browsertest.Eval[string](b, "location.search.slice(1)"))
				if err != nil || q.Get("from") != want[0] || q.Get("to") != want[1] || (page.keep != "" && q.Get(page.keep) == "") {
					t.Errorf("%s, %s: at ?%s", page.path, label, q.Encode())
				}
				// On the 1st, today is this month: either may be marked.
				if got := b.Text(`nav.presets a[aria-current]`); ranges[got] != want {
					t.Errorf("%s, %s: the preset marked is %q", page.path, label, got)
				}
				if v := browsertest.Eval[string](b, `document.querySelector("input[name=from]").value`); v != want[0] {
					t.Errorf("%s, %s: the form's start date is %q, want %s", page.path, label, v, want[0])
				}
			}
		}
		b.Open("/dashboard/reports")
		b.Submit(`nav.presets a[href*="from=`+ranges["Last month"][0]+`&"]`, `^/dashboard/reports$`)
		b.Shot("presets-reports-last-month-1280")
		if got := browsertest.Eval[string](b, `new URLSearchParams(location.search).get("time")`); got != "day" {
			t.Errorf("a report preset from the first page is by %q, want day", got)
		}
	})
}
