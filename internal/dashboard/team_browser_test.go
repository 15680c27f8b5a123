package dashboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// visibleChanges lists the buttons and links of the page that would change
// something and that a person can see: a viewer must find none.
func visibleChanges(b *browsertest.Tab) []string {
	b.T.Helper()
	return browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("main button, main .change, main a.button"))
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
		b.AtBothWidths(team, "team", func(w int64) {
			if off := b.Offscreen("[data-user] button, [data-user] select, form[data-invite] button"); len(off) > 0 {
				t.Errorf("at %d px, out of reach: %v", w, off)
			}
		})

		// An invitation's link is shown once, with when it expires.
		b.Fill(`form[data-invite]`, map[string]string{"email": viewerEmail, "role": "viewer"})
		b.Submit(`form[data-invite] button`, `^/dashboard/settings/team/invitations$`)
		link := b.Text("[data-invite-link] code")
		if !strings.HasPrefix(link, s.srv.URL+"/dashboard/invite/") || !strings.Contains(b.Text("[data-invite-link]"), "expires on") {
			t.Fatalf("the invitation shown: %q\n%s", link, b.Text("main"))
		}
		b.Shot("team-invited-1280")
		b.Width(390)
		b.Shot("team-invited-390")
		if off := b.Offscreen("[data-invite-link] code"); len(off) > 0 {
			t.Errorf("the link runs off the phone's screen: %v", off)
		}
		b.Width(1280)
		b.Open(team)
		if b.Text("[data-invite-link]") != "" || !strings.Contains(b.Text(`tr[data-invitation="`+viewerEmail+`"]`), "viewer") {
			t.Errorf("the team page again: %s", b.Text("main"))
		}

		// The link opens a page to choose a password, which signs in.
		invite := strings.TrimPrefix(link, s.srv.URL)
		b.AtBothWidths(invite, "invite", func(w int64) {
			if !strings.Contains(b.Text("h1"), "Join Acme") || len(b.Offscreen("form[data-set-password] button, input")) > 0 {
				t.Errorf("at %d px: %s", w, b.Text("main"))
			}
		})
		b.Fill(`form[data-set-password]`, map[string]string{"password": "too short"})
		b.Submit(`form[data-set-password] button`, `^/dashboard/invite/`)
		if !strings.Contains(b.Text(".error-box"), "at least 12 characters") {
			t.Errorf("a short password: %s", b.Text("main"))
		}
		b.Shot("invite-error-1280")
		b.Fill(`form[data-set-password]`, map[string]string{"password": pw})
		b.Submit(`form[data-set-password] button`, `^/dashboard$`)
		if !strings.Contains(b.Text(".flash"), "Welcome") || !strings.Contains(b.Text(".who"), viewerEmail) || b.Text("[data-viewer]") == "" {
			t.Fatalf("after joining: %s", b.Text("body"))
		}

		// The link works once.
		if status := b.Open(invite); status != 404 || !strings.Contains(b.Text("h1"), "no longer works") {
			t.Errorf("the used invitation link: %d %s", status, b.Text("main"))
		}
		b.Shot("invite-used-1280")

		// A viewer sees every page and nothing that would change anything.
		for _, path := range []string{"/dashboard", "/dashboard/offers", "/dashboard/offers/" + d.offer.ID, "/dashboard/partners",
			"/dashboard/partners/" + d.partner.ID, "/dashboard/conversions", "/dashboard/conversions/" + d.conv.ID, "/dashboard/clicks",
			"/dashboard/webhooks", "/dashboard/webhooks/" + d.sub.ID, "/dashboard/payouts", "/dashboard/activity/deliveries",
			"/dashboard/activity/audit", "/dashboard/settings/general", "/dashboard/settings/keys", "/dashboard/settings/fraud", "/dashboard/settings/postback-token", team} {
			if status := b.Open(path); status != 200 {
				t.Errorf("a viewer's %s: %d", path, status)
			}
			if got := visibleChanges(b); len(got) > 0 {
				t.Errorf("a viewer sees what changes things: %v", got)
			}
		}
		b.AtBothWidths(team, "team-viewer", func(int64) {})
		b.AtBothWidths("/dashboard/settings/fraud", "fraud-viewer", func(int64) {})

		// The owner makes a reset link and makes the viewer an owner.
		b.Submit(`form.signout button`, `^/dashboard/sign-in$`)
		b.Fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": "owner@acme.example", "password": pw})
		b.Submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard$`)
		b.Open(team)
		row := `tr[data-user="` + viewerEmail + `"]`
		b.Submit(row+` form[action$="/reset"] button`, `/reset$`)
		reset := b.Text("[data-reset-link] code")
		if !strings.HasPrefix(reset, s.srv.URL+"/dashboard/reset/") {
			t.Fatalf("the reset link shown: %q", reset)
		}
		b.Shot("team-reset-1280")
		b.Fill(row+` form.role-form`, map[string]string{"role": "owner"})
		b.Submit(row+` form.role-form button`, `^/dashboard/settings/team$`)
		if !strings.Contains(b.Text(".flash"), "role was changed") {
			t.Errorf("after changing the role: %s", b.Text("main"))
		}
		if u, _, _ := s.svc.Accounts.Users(ctx, s.brandID, records.ListParams{}); len(u) != 2 || u[0].Role != tally.RoleOwner {
			t.Errorf("users after the change: %+v", u)
		}

		// The reset link sets a new password and signs in.
		b.AtBothWidths(strings.TrimPrefix(reset, s.srv.URL), "reset", func(w int64) {
			if !strings.Contains(b.Text("h1"), "new password") {
				t.Errorf("at %d px: %s", w, b.Text("main"))
			}
		})
		b.Fill(`form[data-set-password]`, map[string]string{"password": "a brand new passphrase"})
		b.Submit(`form[data-set-password] button`, `^/dashboard$`)
		if !strings.Contains(b.Text(".flash"), "new password is set") || !strings.Contains(b.Text(".who"), viewerEmail) || b.Text("[data-viewer]") != "" {
			t.Fatalf("after the reset: %s", b.Text("body"))
		}

		// Removing a user asks first.
		b.Open(team)
		b.Submit(`tr[data-user="owner@acme.example"] form[action$="/remove"] button`, `/remove$`)
		if b.Text("[data-confirm]") == "" {
			t.Fatalf("no confirmation before removing: %s", b.Text("main"))
		}
		b.Shot("confirm-remove-user-1280")
		b.Submit(`[data-confirm] form button`, `^/dashboard/settings/team$`)
		if !strings.Contains(b.Text(".flash"), "removed") || b.Text(`tr[data-user="owner@acme.example"]`) != "" {
			t.Errorf("after removing: %s", b.Text("main"))
		}

		// The audit log tells it all, newest first, by whom.
		b.AtBothWidths("/dashboard/activity/audit", "audit", func(w int64) {
			rows := browsertest.Eval[[]string](b, `Array.from(document.querySelectorAll("tr[data-action]")).map(r => r.dataset.action)`)
			want := "user.removed password.reset user.role_changed password.reset_created user.joined user.invited"
			if got := strings.Join(rows, " "); !strings.HasPrefix(got, want) {
				t.Errorf("at %d px the audit log is %q, want it to start %q", w, got, want)
			}
			if !strings.Contains(b.Text(`tr[data-action="user.invited"]`), "owner@acme.example") {
				t.Errorf("the invitation's entry: %s", b.Text(`tr[data-action="user.invited"]`))
			}
			if off := b.Offscreen("tr[data-action] td"); len(off) > 0 {
				t.Errorf("at %d px, out of view: %v", w, off)
			}
		})
	})
}
