package portal_test

import (
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// A partner takes the brand's invitation, sets a password and goes
// through every page of the portal in a real browser, at 1280 and 390 px:
// everything in view, nothing of revenue or of another partner.
func TestPortalInTheBrowser(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		w := newWorld(t, st)
		b := browsertest.NewTab(t, w.srv.URL)
		fits := func(path string, width int64) {
			t.Helper()
			if off := b.Offscreen("header nav a, main td, main th, main button, main label, main code"); len(off) > 0 {
				t.Errorf("%s at %d px: out of view: %v", path, width, off)
			}
			if sw := browsertest.Eval[float64](b, "document.documentElement.scrollWidth"); sw > float64(width) {
				t.Errorf("%s at %d px: the page is %v px wide", path, width, sw)
			}
			w.noRevenue(path, browsertest.Eval[string](b, "document.documentElement.outerHTML"))
		}

		// The brand invites Ann from her page in its dashboard.
		b.Open("/dashboard/sign-in")
		b.Fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": "owner@acme.example", "password": pw})
		b.Submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard$`)
		b.Open("/dashboard/partners/" + w.ann.ID)
		b.Submit(`form[action="/dashboard/partners/`+w.ann.ID+`/invite"] button`, `^/dashboard/partners/`+w.ann.ID+`/invite$`)
		b.Shot("dashboard-partner-invite")
		link := b.Text("[data-invite-url]")
		invite, ok := strings.CutPrefix(link, w.srv.URL)
		if !ok || !strings.HasPrefix(invite, "/portal/invite/") {
			t.Fatalf("the dashboard's invitation link %q", link)
		}
		b.Submit(`form[action="/dashboard/sign-out"] button`, `^/dashboard/sign-in$`)
		b.AtBothWidths(invite, "portal-invite", func(width int64) {
			fits("the invitation", width)
			if h := b.Text("h1"); h != "Welcome, Ann Reviews" {
				t.Errorf("invitation heading %q", h)
			}
		})
		b.Fill(`form[action="`+invite+`"]`, map[string]string{"password": "short", "confirm": "short"})
		b.Submit(`form[action="`+invite+`"] button`, `^/portal/invite/`)
		if e := b.Text(".error-box"); !strings.Contains(e, "at least 12 characters") {
			t.Errorf("a short password: %q", e)
		}
		b.Fill(`form[action="`+invite+`"]`, map[string]string{"password": pw, "confirm": pw})
		b.Submit(`form[action="`+invite+`"] button`, `^/portal$`)
		if f := b.Text(".flash"); !strings.Contains(f, "Welcome") {
			t.Errorf("after the invitation: notice %q", f)
		}

		pages := []struct{ path, name, want string }{
			{"/portal", "portal-overview", "EPC"},
			{"/portal/links", "portal-links", "Running shoes"},
			{"/portal/links?offer=" + w.offer.ID + "&sub1=spring-sale&sub2=banner#builder", "portal-builder", "sub1=spring-sale&sub2=banner"},
			{"/portal/conversions", "portal-conversions", "autumn"},
			{"/portal/payouts", "portal-payouts", "10.00"},
			{"/portal/postback", "portal-postback", "succeeded"},
			{"/portal/postback/deliveries/" + w.deliveries[w.ann.ID], "portal-delivery", "counted"},
		}
		for _, p := range pages {
			b.AtBothWidths(p.path, p.name, func(width int64) {
				fits(p.path, width)
				if body := b.Text("main"); !strings.Contains(body, p.want) {
					t.Errorf("%s lacks %q:\n%s", p.path, p.want, body)
				}
			})
		}
		if got := b.Text("[data-stat=clicks]"); got != "" {
			t.Logf("clicks: %s", got)
		}

		// The postback's test button, then its delivery in the list.
		b.Open("/portal/postback")
		b.Submit(`form[action="/portal/postback/test"] button`, `^/portal/postback$`)
		if f := b.Text(".flash"); !strings.Contains(f, "test postback") {
			t.Errorf("after the test button: notice %q", f)
		}

		// Signing out, and in again through the sign-in page.
		b.Submit(`form[action="/portal/sign-out"] button`, `^/portal/sign-in$`)
		b.AtBothWidths("/portal/sign-in", "portal-sign-in", func(width int64) { fits("sign-in", width) })
		b.Fill(`form[action="/portal/sign-in"]`, map[string]string{"email": "ann@example.com", "password": pw})
		b.Submit(`form[action="/portal/sign-in"] button`, `^/portal$`)
		if got := b.Text("header .brand"); !strings.Contains(got, "Ann Reviews") || !strings.Contains(got, "Acme Shoes") {
			t.Errorf("signed in as %q", got)
		}
	})
}
