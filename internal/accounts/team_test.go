package accounts_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

const pw = "a long passphrase for tests"

type team struct {
	t       *testing.T
	svc     *service.Service
	clock   *testenv.Clock
	brandID string
	owner   tally.User
	ctx     context.Context // acting as the owner
}

func newTeam(t *testing.T, st store.Store) *team {
	t.Helper()
	clock := testenv.NewClock(testenv.Start())
	svc := servicetest.New(st, service.WithClock(clock.Now))
	tm := &team{t: t, svc: svc, clock: clock}
	tm.brandID, tm.owner = tm.brand("owner@acme.example")
	tm.ctx = audit.WithActor(context.Background(), audit.User(tm.owner.ID, tm.owner.Email))
	return tm
}

// brand makes a brand with one owner.
func (tm *team) brand(email string) (string, tally.User) {
	tm.t.Helper()
	b, err := tm.svc.Identity.CreateBrand(context.Background(), "Acme")
	if err != nil {
		tm.t.Fatal(err)
	}
	p := pw
	u, err := tm.svc.Accounts.CreateUser(context.Background(), accounts.UserInput{BrandID: &b.ID, Email: &email, Password: &p})
	if err != nil {
		tm.t.Fatal(err)
	}
	return b.ID, u
}

// join invites email with role and accepts the invitation.
func (tm *team) join(email, role string) tally.User {
	tm.t.Helper()
	_, token, err := tm.svc.Accounts.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: &email, Role: &role})
	if err != nil {
		tm.t.Fatal(err)
	}
	u, err := tm.svc.Accounts.AcceptInvitation(context.Background(), token, pw)
	if err != nil {
		tm.t.Fatal(err)
	}
	return u
}

func (tm *team) signIn(email, password string) (string, error) {
	u, err := tm.svc.Accounts.SignIn(context.Background(), email, password)
	if err != nil {
		return "", err
	}
	token, _, err := tm.svc.Accounts.StartSession(context.Background(), u)
	return token, err
}

func (tm *team) auditActions() []string {
	tm.t.Helper()
	entries, _, err := tm.svc.Audit.Entries(context.Background(), tm.brandID, records.ListParams{Limit: 100})
	if err != nil {
		tm.t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Action)
	}
	return out
}

func code(err error) string {
	if err == nil {
		return ""
	}
	return tally.ErrorCode(err)
}

// An invitation's link works once, for 7 days, as an owner made it; only
// its hash is stored; accepting it makes the user with the invited role.
func TestInvitations(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		tm := newTeam(t, st)
		acc := tm.svc.Accounts
		email, role := " Viewer@Acme.example ", tally.RoleViewer
		inv, token, err := acc.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: &email, Role: &role})
		if err != nil {
			t.Fatal(err)
		}
		if inv.Email != "viewer@acme.example" || inv.Role != role || !inv.ExpiresAt.Equal(tm.clock.Now().Truncate(time.Millisecond).Add(7*24*time.Hour)) || len(token) < 40 {
			t.Fatalf("invitation %+v, token %q", inv, token)
		}
		it, err := st.Get(context.Background(), keys.Invitation(identity.Hash(token)))
		if err != nil || strings.Contains(string(it.Data), token) || it.ExpiresAt != inv.ExpiresAt.Unix() {
			t.Fatalf("stored invitation %+v (%v): want it under the token's hash, without the token, expiring with it", it, err)
		}
		if pending, err := acc.Invitations(context.Background(), tm.brandID); err != nil || len(pending) != 1 || pending[0].ID != inv.ID {
			t.Fatalf("pending invitations %+v, %v", pending, err)
		}
		for _, bad := range []accounts.InvitationInput{{Email: ptr("nope"), Role: &role}, {Email: ptr("a@acme.example"), Role: ptr("admin")}, {Email: ptr("a@acme.example")}} {
			if _, _, err := acc.Invite(tm.ctx, tm.brandID, tm.owner.Email, bad); code(err) != tally.ECodeValidation {
				t.Errorf("invite %+v: %v, want 422", bad, err)
			}
		}
		if _, _, err := acc.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: ptr("OWNER@acme.example"), Role: &role}); code(err) != tally.ECodeConflict {
			t.Errorf("inviting a user: %v, want 409", err)
		}

		if _, err := acc.AcceptInvitation(context.Background(), token, "too short"); code(err) != tally.ECodeValidation {
			t.Errorf("a short password: %v, want 422", err)
		}
		if got, err := acc.PendingInvitation(context.Background(), token); err != nil || got.ID != inv.ID {
			t.Fatalf("the link after a refused password: %+v, %v", got, err)
		}
		// Two acceptances at once: one makes the user.
		var wg sync.WaitGroup
		errs := make([]error, 4)
		for i := range errs {
			wg.Go(func() { _, errs[i] = acc.AcceptInvitation(context.Background(), token, pw) })
		}
		wg.Wait()
		ok := 0
		for _, err := range errs {
			switch code(err) {
			case "":
				ok++
			case tally.ECodeNotFound, tally.ECodeConflict:
			default:
				t.Errorf("a racing acceptance: %v", err)
			}
		}
		if ok != 1 {
			t.Fatalf("%d acceptances succeeded, want 1: %v", ok, errs)
		}
		u, err := acc.SignIn(context.Background(), "viewer@acme.example", pw)
		if err != nil || u.Role != tally.RoleViewer || u.BrandID != tm.brandID {
			t.Fatalf("the invited user signs in as %+v, %v", u, err)
		}
		if _, err := acc.PendingInvitation(context.Background(), token); code(err) != tally.ECodeNotFound {
			t.Errorf("a used link: %v, want 404", err)
		}

		// Revoked and expired links stop working.
		revoked, revokedToken, _ := acc.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: ptr("r@acme.example"), Role: &role})
		_, expiredToken, _ := acc.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: ptr("e@acme.example"), Role: &role})
		otherBrand, _ := tm.brand("other@else.example")
		if _, err := acc.RevokeInvitation(tm.ctx, otherBrand, revoked.ID); code(err) != tally.ECodeNotFound {
			t.Errorf("another brand revokes the invitation: %v, want 404", err)
		}
		if _, err := acc.RevokeInvitation(tm.ctx, tm.brandID, revoked.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.AcceptInvitation(context.Background(), revokedToken, pw); code(err) != tally.ECodeNotFound {
			t.Errorf("a revoked link: %v, want 404", err)
		}
		tm.clock.Advance(7 * 24 * time.Hour)
		if _, err := acc.AcceptInvitation(context.Background(), expiredToken, pw); code(err) != tally.ECodeNotFound {
			t.Errorf("an expired link: %v, want 404", err)
		}
		if pending, _ := acc.Invitations(context.Background(), tm.brandID); len(pending) != 0 {
			t.Errorf("pending after 7 days: %+v", pending)
		}
		want := "user.invitation_revoked user.invited user.invited user.joined user.invited"
		if got := strings.Join(tm.auditActions(), " "); got != want {
			t.Errorf("audit log %q, want %q", got, want)
		}
	})
}

func ptr[T any](v T) *T { return &v }

// Roles: users stored before roles are owners; an owner changes roles and
// removes users, never the last owner, even when two owners demote each
// other at once; a removed user's sessions end.
func TestRolesAndRemoval(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		tm := newTeam(t, st)
		acc := tm.svc.Accounts
		ctx := context.Background()

		// A user stored without a role reads as an owner.
		legacy := `{"id":"usr_01kb7k3m5n6p7q8r9s0t1v2w3x","brandId":"` + tm.brandID + `","email":"old@acme.example","createdAt":"2026-01-02T03:04:05.000Z","passwordHash":"x"}`
		if err := st.Transact(ctx, store.Put(store.Item{Key: keys.User("old@acme.example"),
			GSI1: store.IndexKey{PK: keys.UsersByBrand(tm.brandID), SK: "usr_01kb7k3m5n6p7q8r9s0t1v2w3x"}, Data: []byte(legacy)})); err != nil {
			t.Fatal(err)
		}
		if u, err := acc.User(ctx, tm.brandID, "usr_01kb7k3m5n6p7q8r9s0t1v2w3x"); err != nil || u.Role != tally.RoleOwner {
			t.Fatalf("a user stored without a role: %+v, %v", u, err)
		}
		if _, err := acc.RemoveUser(tm.ctx, tm.brandID, "usr_01kb7k3m5n6p7q8r9s0t1v2w3x"); err != nil {
			t.Fatal(err)
		}

		// The last owner stays.
		if _, err := acc.SetRole(tm.ctx, tm.brandID, tm.owner.ID, tally.RoleViewer); code(err) != tally.ECodeConflict {
			t.Errorf("demoting the only owner: %v, want 409", err)
		}
		if _, err := acc.RemoveUser(tm.ctx, tm.brandID, tm.owner.ID); code(err) != tally.ECodeConflict {
			t.Errorf("removing the only owner: %v, want 409", err)
		}
		if _, err := acc.SetRole(tm.ctx, tm.brandID, tm.owner.ID, "admin"); code(err) != tally.ECodeValidation {
			t.Errorf("an unknown role: %v, want 422", err)
		}
		viewer := tm.join("v@acme.example", tally.RoleViewer)
		token, err := tm.signIn("v@acme.example", pw)
		if err != nil {
			t.Fatal(err)
		}
		if sess, err := acc.Session(ctx, token); err != nil || sess.CanChange() {
			t.Fatalf("a viewer's session %+v, %v: want one that cannot change anything", sess, err)
		}
		if u, err := acc.SetRole(tm.ctx, tm.brandID, viewer.ID, tally.RoleOwner); err != nil || u.Role != tally.RoleOwner {
			t.Fatalf("promote: %+v, %v", u, err)
		}
		if sess, err := acc.Session(ctx, token); err != nil || !sess.CanChange() {
			t.Fatalf("the promoted user's session %+v, %v: want the new role at once", sess, err)
		}

		// Another brand reaches none of this brand's users.
		other, _ := tm.brand("boss@else.example")
		if _, err := acc.SetRole(tm.ctx, other, viewer.ID, tally.RoleViewer); code(err) != tally.ECodeNotFound {
			t.Errorf("another brand's role change: %v, want 404", err)
		}
		if _, err := acc.RemoveUser(tm.ctx, other, viewer.ID); code(err) != tally.ECodeNotFound {
			t.Errorf("another brand's removal: %v, want 404", err)
		}
		if _, _, err := acc.CreateReset(tm.ctx, other, viewer.ID); code(err) != tally.ECodeNotFound {
			t.Errorf("another brand's reset: %v, want 404", err)
		}

		// Two owners demoting each other at once: one stays an owner.
		for round := range 3 {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, id := range []string{tm.owner.ID, viewer.ID} {
				wg.Go(func() { _, errs[i] = acc.SetRole(tm.ctx, tm.brandID, id, tally.RoleViewer) })
			}
			wg.Wait()
			a, _ := acc.User(ctx, tm.brandID, tm.owner.ID)
			b, _ := acc.User(ctx, tm.brandID, viewer.ID)
			if (a.Role == tally.RoleOwner) == (b.Role == tally.RoleOwner) {
				t.Fatalf("round %d: roles %s and %s after racing demotions (%v), want exactly one owner", round, a.Role, b.Role, errs)
			}
			for _, u := range []tally.User{a, b} {
				if _, err := acc.SetRole(tm.ctx, tm.brandID, u.ID, tally.RoleOwner); err != nil {
					t.Fatal(err)
				}
			}
		}

		if _, err := acc.RemoveUser(tm.ctx, tm.brandID, viewer.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Session(ctx, token); code(err) != tally.ECodeUnauthorized {
			t.Errorf("a removed user's session: %v, want ended", err)
		}
		if _, err := acc.SignIn(ctx, "v@acme.example", pw); code(err) != tally.ECodeUnauthorized {
			t.Errorf("a removed user signs in: %v", err)
		}
		actions := strings.Join(tm.auditActions(), " ")
		if !strings.HasPrefix(actions, "user.removed ") || !strings.Contains(actions, "user.role_changed") || !strings.HasSuffix(actions, " user.removed") {
			t.Errorf("audit log %q", actions)
		}
	})
}

// A password reset link works once, for an hour; using it sets the
// password and ends the user's sessions.
func TestPasswordResets(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		tm := newTeam(t, st)
		acc := tm.svc.Accounts
		ctx := context.Background()
		viewer := tm.join("v@acme.example", tally.RoleViewer)
		old, err := tm.signIn("v@acme.example", pw)
		if err != nil {
			t.Fatal(err)
		}
		reset, token, err := acc.CreateReset(tm.ctx, tm.brandID, viewer.ID)
		if err != nil || reset.UserID != viewer.ID || !reset.ExpiresAt.Equal(tm.clock.Now().Truncate(time.Millisecond).Add(time.Hour)) {
			t.Fatalf("reset %+v, %v", reset, err)
		}
		if it, err := st.Get(ctx, keys.PasswordReset(identity.Hash(token))); err != nil || strings.Contains(string(it.Data), token) {
			t.Fatalf("stored reset %+v, %v", it, err)
		}
		if _, err := acc.UseReset(ctx, token, "short"); code(err) != tally.ECodeValidation {
			t.Errorf("a short password: %v, want 422", err)
		}
		const newPW = "a brand new passphrase"
		if _, err := acc.UseReset(ctx, token, newPW); err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Session(ctx, old); code(err) != tally.ECodeUnauthorized {
			t.Errorf("a session begun before the reset: %v, want ended", err)
		}
		if _, err := tm.signIn("v@acme.example", pw); code(err) != tally.ECodeUnauthorized {
			t.Errorf("the old password: %v, want refused", err)
		}
		fresh, err := tm.signIn("v@acme.example", newPW)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := acc.Session(ctx, fresh); err != nil {
			t.Errorf("a session begun after the reset: %v", err)
		}
		if _, err := acc.UseReset(ctx, token, "yet another passphrase"); code(err) != tally.ECodeNotFound {
			t.Errorf("a used reset: %v, want 404", err)
		}
		_, late, err := acc.CreateResetByEmail(ctx, "V@acme.example")
		if err != nil {
			t.Fatal(err)
		}
		tm.clock.Advance(time.Hour)
		if _, err := acc.PendingReset(ctx, late); code(err) != tally.ECodeNotFound {
			t.Errorf("a reset an hour old: %v, want 404", err)
		}
		if got := strings.Join(tm.auditActions(), " "); got != "password.reset password.reset_created user.joined user.invited" {
			t.Errorf("audit log %q", got)
		}
	})
}

// Pending invitations count toward a brand's users: each could be accepted
// without another check, which would take the team past its bound.
func TestInvitationsCountTowardTheTeamBound(t *testing.T) {
	tm := newTeam(t, testenv.Bolt(t))
	role := tally.RoleViewer
	for i := range accounts.MaxTeam - 1 { // and the owner
		email := fmt.Sprintf("v%d@acme.example", i)
		if _, _, err := tm.svc.Accounts.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: &email, Role: &role}); err != nil {
			t.Fatal(err)
		}
	}
	email := "one-more@acme.example"
	if _, _, err := tm.svc.Accounts.Invite(tm.ctx, tm.brandID, tm.owner.Email, accounts.InvitationInput{Email: &email, Role: &role}); code(err) != tally.ECodeConflict {
		t.Errorf("an invitation past %d users and invitations: %v, want conflict", accounts.MaxTeam, err)
	}
}
