package dashboard_test

import (
	"context"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

const viewerEmail = "viewer@acme.example"

// addViewer invites a viewer as the owner and accepts the invitation.
func (s *site) addViewer(t testing.TB) tally.User {
	t.Helper()
	ctx := audit.WithActor(context.Background(), audit.User("usr_owner", "owner@acme.example"))
	_, token, err := s.svc.Accounts.Invite(ctx, s.brandID, "owner@acme.example", accounts.InvitationInput{Email: ptr(viewerEmail), Role: ptr(tally.RoleViewer)})
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.svc.Accounts.AcceptInvitation(context.Background(), token, pw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

var pathParam = regexp.MustCompile(`\{[^}]+\}`)

// A viewer's every form that changes something is refused with a page
// saying an owner does it, whatever the route (the dashboard's own list
// of them), and changes nothing; signing out still works.
func TestViewersChangeNothing(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		s.addViewer(t)
		c := client(t)
		tok := token(t, s.get(c, "/dashboard/sign-in"))
		if p := s.post(c, "/dashboard/sign-in", url.Values{"csrf": {tok}, "email": {viewerEmail}, "password": {pw}}); p.status != 303 {
			t.Fatalf("viewer sign-in: %d", p.status)
		}
		csrf := token(t, s.get(c, "/dashboard/settings/keys"))
		ids := map[string]string{"{id}": d.partner.ID, "{action}": "ban", "{partnerId}": d.partner.ID}
		posts := 0
		for _, route := range dashboard.Routes() {
			method, path, _ := strings.Cut(route, " ")
			if method != "POST" || path == "/dashboard/sign-out" {
				continue
			}
			posts++
			path = pathParam.ReplaceAllStringFunc(path, func(p string) string { return ids[p] })
			p := s.post(c, path, url.Values{"csrf": {csrf}, "confirm": {"yes"}, "name": {"x"}, "email": {"x@acme.example"}, "role": {"owner"}})
			if p.status != 403 || !strings.Contains(p.body, "Only an owner can do this") || !strings.Contains(p.body, `href="/dashboard/offers"`) {
				t.Errorf("a viewer's POST %s: %d, want 403 with the owner page in the navigation", path, p.status)
			}
		}
		if posts < 30 {
			t.Errorf("only %d forms checked: the dashboard lists %v", posts, dashboard.Routes())
		}
		if got, _ := s.svc.Partners.Partner(context.Background(), s.brandID, d.partner.ID); got.Status != tally.PartnerActive {
			t.Errorf("the partner is %s after a viewer's ban", got.Status)
		}
		keys, _, _ := s.svc.Identity.ActiveAPIKeys(context.Background(), s.brandID, records.ListParams{})
		entries, _, _ := s.svc.Audit.Entries(context.Background(), s.brandID, records.ListParams{})
		if len(keys) != 0 || len(entries) != 2 { // the invitation and the joining
			t.Errorf("after a viewer's forms: %d keys, audit log %+v", len(keys), entries)
		}
		// A viewer reads every page, and signs out.
		for _, path := range []string{"/dashboard", "/dashboard/settings/team", "/dashboard/activity/audit", "/dashboard/offers/" + d.offer.ID} {
			if p := s.get(c, path); p.status != 200 || !strings.Contains(p.body, "data-viewer") {
				t.Errorf("a viewer's GET %s: %d", path, p.status)
			}
		}
		if p := s.post(c, "/dashboard/sign-out", url.Values{"csrf": {csrf}}); p.status != 303 {
			t.Errorf("a viewer signs out: %d", p.status)
		}
	})
}

// The changes made in the dashboard are in the audit log as the signed-in
// user's; the log pages newest first with newer and older links.
func TestAuditLogPage(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		c := client(t)
		s.signIn(c, "")
		csrf := token(t, s.get(c, "/dashboard/settings/keys"))
		created := s.post(c, "/dashboard/settings/keys", url.Values{"csrf": {csrf}, "name": {"Order <b>system</b>"}})
		secret := regexp.MustCompile(`tally_sk_[0-9a-f]{48}`).FindString(created.body)
		if created.status != 200 || secret == "" {
			t.Fatalf("create key: %d", created.status)
		}
		p := s.get(c, "/dashboard/activity/audit")
		if !strings.Contains(p.body, `data-action="key.created"`) || !strings.Contains(p.body, "owner@acme.example") ||
			!strings.Contains(p.body, "Order &lt;b&gt;system&lt;/b&gt;") || strings.Contains(p.body, secret) {
			t.Fatalf("the audit log after creating a key:\n%s", p.body)
		}
		// 60 more changes: two pages.
		ctx := audit.WithActor(context.Background(), audit.Key("key_01kb7k3m5n6p7q8r9s0t1v2w3x"))
		for i := range 60 {
			if _, err := s.svc.Clicks.BlockIP(ctx, s.brandID, clicks.BlockedIPInput{CIDR: ptr("203.0.113." + strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
		first := s.get(c, "/dashboard/activity/audit")
		if n := strings.Count(first.body, "data-action="); n != 50 || strings.Contains(first.body, `rel="prev"`) || !strings.Contains(first.body, "203.0.113.59") {
			t.Fatalf("first page: %d entries, newer link %v", n, strings.Contains(first.body, `rel="prev"`))
		}
		older := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(first.body)
		if older == nil {
			t.Fatal("no older link on the first page")
		}
		second := s.get(c, unescape(older[1]))
		if n := strings.Count(second.body, "data-action="); n != 11 || strings.Contains(second.body, `rel="next"`) || !strings.Contains(second.body, `data-action="key.created"`) {
			t.Fatalf("second page: %d entries", n)
		}
		newer := regexp.MustCompile(`href="([^"]+)" rel="prev"`).FindStringSubmatch(second.body)
		if newer == nil {
			t.Fatal("no newer link on the second page")
		}
		if back := s.get(c, unescape(newer[1])); strings.Count(back.body, "data-action=") != 50 || !strings.Contains(back.body, "203.0.113.59") {
			t.Errorf("newer from the second page is not the first")
		}
		if !strings.Contains(second.body, "API key key_01kb7k3m5n6p7q8r9s0t1v2w3x") {
			t.Errorf("an API key's change does not name the key")
		}
	})
}

func unescape(href string) string { return strings.ReplaceAll(href, "&amp;", "&") }

// The team's forms keep the last owner, sign out an owner who removes
// themselves, and the link pages count against the sign-in throttle.
func TestTeamForms(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		c := client(t)
		s.signIn(c, "")
		csrf := token(t, s.get(c, "/dashboard/settings/team"))
		users, _, _ := s.svc.Accounts.Users(context.Background(), s.brandID, records.ListParams{})
		me := users[0].ID
		if p := s.post(c, "/dashboard/settings/team/users/"+me+"/role", url.Values{"csrf": {csrf}, "role": {"viewer"}}); p.status != 409 || !strings.Contains(p.body, "only owner") {
			t.Errorf("the last owner becomes a viewer: %d", p.status)
		}
		if p := s.post(c, "/dashboard/settings/team/users/"+me+"/remove", url.Values{"csrf": {csrf}}); p.status != 200 || !strings.Contains(p.body, "data-confirm") {
			t.Errorf("removing yourself does not ask first: %d", p.status)
		}
		other := s.addViewer(t)
		if _, err := s.svc.Accounts.SetRole(context.Background(), s.brandID, other.ID, tally.RoleOwner); err != nil {
			t.Fatal(err)
		}
		p := s.post(c, "/dashboard/settings/team/users/"+me+"/remove", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
		if p.status != 303 || p.header.Get("Location") != "/dashboard/sign-in" {
			t.Errorf("removing yourself: %d to %q, want the sign-in page", p.status, p.header.Get("Location"))
		}
		if p := s.get(c, "/dashboard"); p.status != 303 {
			t.Errorf("the removed owner's session still opens pages: %d", p.status)
		}

		// Guessing links is as slow as guessing passwords.
		anon := client(t)
		form := token(t, s.get(anon, "/dashboard/sign-in"))
		limited := 0
		for i := range 31 {
			p := s.post(anon, "/dashboard/reset/guess"+strconv.Itoa(i), url.Values{"csrf": {form}, "password": {"a long enough password"}})
			switch p.status {
			case 404:
			case 429:
				limited++
			default:
				t.Fatalf("a guessed reset link: %d", p.status)
			}
		}
		if limited != 2 { // the owner's sign-in from this address took one of the 30 attempts
			t.Errorf("%d of 31 guesses refused, want the last two", limited)
		}
	})
}
