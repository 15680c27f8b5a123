package dashboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// visibleChanges lists the buttons and links of the page that would change
// something and that a person can see: a viewer must find none.
func (b *tab) visibleChanges() []string {
	b.t.Helper()
	return eval[[]string](b, `Array.from(document.querySelectorAll("main button, main .change, main a.button"))
		.filter(e => e.offsetParent !== null && (e.tagName !== "BUTTON" || (e.form && e.form.method === "post")) && !(e.tagName === "A" && !e.classList.contains("change")))
		.map(e => location.pathname + ": " + (e.innerText || e.tagName).trim().slice(0, 40))`)
}

// The team's pages as an owner and a viewer use them: invite (the link
// shown once), join by the link, look around as a viewer, a reset link,
// a role change, removal after a confirmation, and the audit log of it
// all, at 1280 and 390 px.
func TestTeamPagesInTheBrowser(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		b := s.newTab(t)
		team := "/dashboard/settings/team"
		b.atBothWidths(team, "team", func(w int64) {
			if off := b.offscreen("[data-user] button, [data-user] select, form[data-invite] button"); len(off) > 0 {
				t.Errorf("at %d px, out of reach: %v", w, off)
			}
		})

		// An invitation's link is shown once, with when it expires.
		b.fill(`form[data-invite]`, map[string]string{"email": viewerEmail, "role": "viewer"})
		b.submit(`form[data-invite] button`, `^/dashboard/settings/team/invitations$`)
		link := b.text("[data-invite-link] code")
		if !strings.HasPrefix(link, s.srv.URL+"/dashboard/invite/") || !strings.Contains(b.text("[data-invite-link]"), "expires on") {
			t.Fatalf("the invitation shown: %q\n%s", link, b.text("main"))
		}
		b.shot("team-invited-1280")
		b.width(390)
		b.shot("team-invited-390")
		if off := b.offscreen("[data-invite-link] code"); len(off) > 0 {
			t.Errorf("the link runs off the phone's screen: %v", off)
		}
		b.width(1280)
		b.open(team)
		if b.text("[data-invite-link]") != "" || !strings.Contains(b.text(`tr[data-invitation="`+viewerEmail+`"]`), "viewer") {
			t.Errorf("the team page again: %s", b.text("main"))
		}

		// The link opens a page to choose a password, which signs in.
		invite := strings.TrimPrefix(link, s.srv.URL)
		b.atBothWidths(invite, "invite", func(w int64) {
			if !strings.Contains(b.text("h1"), "Join Acme") || len(b.offscreen("form[data-set-password] button, input")) > 0 {
				t.Errorf("at %d px: %s", w, b.text("main"))
			}
		})
		b.fill(`form[data-set-password]`, map[string]string{"password": "too short"})
		b.submit(`form[data-set-password] button`, `^/dashboard/invite/`)
		if !strings.Contains(b.text(".error-box"), "at least 12 characters") {
			t.Errorf("a short password: %s", b.text("main"))
		}
		b.shot("invite-error-1280")
		b.fill(`form[data-set-password]`, map[string]string{"password": pw})
		b.submit(`form[data-set-password] button`, `^/dashboard$`)
		if !strings.Contains(b.text(".flash"), "Welcome") || !strings.Contains(b.text(".who"), viewerEmail) || b.text("[data-viewer]") == "" {
			t.Fatalf("after joining: %s", b.text("body"))
		}

		// The link works once.
		if status := b.open(invite); status != 404 || !strings.Contains(b.text("h1"), "no longer works") {
			t.Errorf("the used invitation link: %d %s", status, b.text("main"))
		}
		b.shot("invite-used-1280")

		// A viewer sees every page and nothing that would change anything.
		for _, path := range []string{"/dashboard", "/dashboard/offers", "/dashboard/offers/" + d.offer.ID, "/dashboard/partners",
			"/dashboard/partners/" + d.partner.ID, "/dashboard/conversions", "/dashboard/conversions/" + d.conv.ID, "/dashboard/clicks",
			"/dashboard/webhooks", "/dashboard/webhooks/" + d.sub.ID, "/dashboard/payouts", "/dashboard/activity/deliveries",
			"/dashboard/activity/audit", "/dashboard/settings/general", "/dashboard/settings/keys", "/dashboard/settings/fraud", "/dashboard/settings/postback-token", team} {
			if status := b.open(path); status != 200 {
				t.Errorf("a viewer's %s: %d", path, status)
			}
			if got := b.visibleChanges(); len(got) > 0 {
				t.Errorf("a viewer sees what changes things: %v", got)
			}
		}
		b.atBothWidths(team, "team-viewer", func(int64) {})
		b.atBothWidths("/dashboard/settings/fraud", "fraud-viewer", func(int64) {})

		// The owner makes a reset link and makes the viewer an owner.
		b.submit(`form.signout button`, `^/dashboard/sign-in$`)
		b.fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": "owner@acme.example", "password": pw})
		b.submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard$`)
		b.open(team)
		row := `tr[data-user="` + viewerEmail + `"]`
		b.submit(row+` form[action$="/reset"] button`, `/reset$`)
		reset := b.text("[data-reset-link] code")
		if !strings.HasPrefix(reset, s.srv.URL+"/dashboard/reset/") {
			t.Fatalf("the reset link shown: %q", reset)
		}
		b.shot("team-reset-1280")
		b.fill(row+` form.role-form`, map[string]string{"role": "owner"})
		b.submit(row+` form.role-form button`, `^/dashboard/settings/team$`)
		if !strings.Contains(b.text(".flash"), "role was changed") {
			t.Errorf("after changing the role: %s", b.text("main"))
		}
		if u, _, _ := s.svc.Accounts.Users(ctx, s.brandID, records.ListParams{}); len(u) != 2 || u[0].Role != tally.RoleOwner {
			t.Errorf("users after the change: %+v", u)
		}

		// The reset link sets a new password and signs in.
		b.atBothWidths(strings.TrimPrefix(reset, s.srv.URL), "reset", func(w int64) {
			if !strings.Contains(b.text("h1"), "new password") {
				t.Errorf("at %d px: %s", w, b.text("main"))
			}
		})
		b.fill(`form[data-set-password]`, map[string]string{"password": "a brand new passphrase"})
		b.submit(`form[data-set-password] button`, `^/dashboard$`)
		if !strings.Contains(b.text(".flash"), "new password is set") || !strings.Contains(b.text(".who"), viewerEmail) || b.text("[data-viewer]") != "" {
			t.Fatalf("after the reset: %s", b.text("body"))
		}

		// Removing a user asks first.
		b.open(team)
		b.submit(`tr[data-user="owner@acme.example"] form[action$="/remove"] button`, `/remove$`)
		if b.text("[data-confirm]") == "" {
			t.Fatalf("no confirmation before removing: %s", b.text("main"))
		}
		b.shot("confirm-remove-user-1280")
		b.submit(`[data-confirm] form button`, `^/dashboard/settings/team$`)
		if !strings.Contains(b.text(".flash"), "removed") || b.text(`tr[data-user="owner@acme.example"]`) != "" {
			t.Errorf("after removing: %s", b.text("main"))
		}

		// The audit log tells it all, newest first, by whom.
		b.atBothWidths("/dashboard/activity/audit", "audit", func(w int64) {
			rows := eval[[]string](b, `Array.from(document.querySelectorAll("tr[data-action]")).map(r => r.dataset.action)`)
			want := "user.removed password.reset user.role_changed password.reset_created user.joined user.invited"
			if got := strings.Join(rows, " "); !strings.HasPrefix(got, want) {
				t.Errorf("at %d px the audit log is %q, want it to start %q", w, got, want)
			}
			if !strings.Contains(b.text(`tr[data-action="user.invited"]`), "owner@acme.example") {
				t.Errorf("the invitation's entry: %s", b.text(`tr[data-action="user.invited"]`))
			}
			if off := b.offscreen("tr[data-action] td"); len(off) > 0 {
				t.Errorf("at %d px, out of view: %v", w, off)
			}
		})
	})
}
