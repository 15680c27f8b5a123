package portalaccess_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

const pw = "correct horse battery"

func ptr[T any](v T) *T { return &v }

// world is a service with a brand and helpers to make its partners.
type world struct {
	t     *testing.T
	svc   *service.Service
	clock *testenv.Clock
}

func newWorld(t *testing.T, st store.Store) *world {
	clock := testenv.NewClock(testenv.Start())
	return &world{t: t, svc: servicetest.New(st, service.WithClock(clock.Now)), clock: clock}
}

func (w *world) brand(name string) string {
	b, err := w.svc.Identity.CreateBrand(context.Background(), name)
	if err != nil {
		w.t.Fatal(err)
	}
	return b.ID
}

// partner applies with email and, when active, is approved.
func (w *world) partner(brandID, email string, active bool) tally.Partner {
	ctx := context.Background()
	p, err := w.svc.Partners.Apply(ctx, brandID, partners.ApplicationInput{Name: ptr("Partner " + email), Email: ptr(email)})
	if err != nil {
		w.t.Fatal(err)
	}
	if active {
		if p, err = w.svc.Partners.ApprovePartner(ctx, brandID, p.ID); err != nil {
			w.t.Fatal(err)
		}
	}
	return p
}

func (w *world) invite(p tally.Partner) string {
	inv, err := w.svc.Portal.Invite(context.Background(), p.BrandID, p.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	return inv.Token
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := tally.ErrorCode(err); got != code {
		t.Errorf("%s: %v (%s), want %s", what, err, got, code)
	}
}

func TestInvitationSetsPasswordAndSignsIn(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		w := newWorld(t, st)
		brand := w.brand("Acme")
		applicant := w.partner(brand, "applicant@example.com", false)
		_, err := w.svc.Portal.Invite(ctx, brand, applicant.ID)
		wantCode(t, "inviting an applicant", err, tally.ECodeInvalidTransition)
		_, err = w.svc.Portal.Invite(ctx, w.brand("Other"), applicant.ID)
		wantCode(t, "inviting another brand's partner", err, tally.ECodeNotFound)

		p := w.partner(brand, "Ann@Example.com", true)
		inv, err := w.svc.Portal.Invite(ctx, brand, p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if want := w.clock.Now().Add(7 * 24 * time.Hour); !inv.ExpiresAt.Equal(want.Truncate(time.Millisecond)) {
			t.Errorf("expires at %v, want %v", inv.ExpiresAt, want)
		}
		shown, err := w.svc.Portal.Invitation(ctx, inv.Token)
		if err != nil || shown.Partner.ID != p.ID || shown.BrandName != "Acme" {
			t.Fatalf("invitation shows %+v, %v", shown, err)
		}
		_, _, err = w.svc.Portal.AcceptInvite(ctx, inv.Token, "short")
		wantCode(t, "a short password", err, tally.ECodeValidation)
		token, sess, err := w.svc.Portal.AcceptInvite(ctx, inv.Token, pw)
		if err != nil || sess.PartnerID != p.ID || sess.BrandID != brand || sess.BrandName != "Acme" {
			t.Fatalf("accepting: %+v, %v", sess, err)
		}
		_, _, err = w.svc.Portal.AcceptInvite(ctx, inv.Token, pw)
		wantCode(t, "the invitation again", err, tally.ECodeNotFound)
		if got, err := w.svc.Portal.Session(ctx, token); err != nil || got.PartnerID != p.ID {
			t.Errorf("session: %+v, %v", got, err)
		}

		_, _, err = w.svc.Portal.SignIn(ctx, "ann@example.com", pw+"x")
		wantCode(t, "a wrong password", err, tally.ECodeUnauthorized)
		_, _, err = w.svc.Portal.SignIn(ctx, "nobody@example.com", pw)
		wantCode(t, "an unknown address", err, tally.ECodeUnauthorized)
		token2, sess2, err := w.svc.Portal.SignIn(ctx, " ANN@example.com ", pw)
		if err != nil || sess2.PartnerID != p.ID {
			t.Fatalf("signing in: %+v, %v", sess2, err)
		}
		if err := w.svc.Portal.EndSession(ctx, token2); err != nil {
			t.Fatal(err)
		}
		_, err = w.svc.Portal.Session(ctx, token2)
		wantCode(t, "a signed-out session", err, tally.ECodeUnauthorized)

		// Banning ends the partner's sessions at their next request and
		// keeps it from signing in; reinstating does not bring them back.
		if _, err := w.svc.Partners.BanPartner(ctx, brand, p.ID); err != nil {
			t.Fatal(err)
		}
		_, err = w.svc.Portal.Session(ctx, token)
		wantCode(t, "a banned partner's session", err, tally.ECodeUnauthorized)
		_, _, err = w.svc.Portal.SignIn(ctx, "ann@example.com", pw)
		wantCode(t, "a banned partner signing in", err, tally.ECodeUnauthorized)
		if _, err := w.svc.Partners.ReactivatePartner(ctx, brand, p.ID); err != nil {
			t.Fatal(err)
		}
		_, err = w.svc.Portal.Session(ctx, token)
		wantCode(t, "an ended session after reinstating", err, tally.ECodeUnauthorized)
		if _, _, err := w.svc.Portal.SignIn(ctx, "ann@example.com", pw); err != nil {
			t.Errorf("signing in again once reinstated: %v", err)
		}

		// A partner banned between invitation and acceptance cannot accept.
		late := w.invite(p)
		if _, err := w.svc.Partners.BanPartner(ctx, brand, p.ID); err != nil {
			t.Fatal(err)
		}
		_, _, err = w.svc.Portal.AcceptInvite(ctx, late, pw)
		wantCode(t, "a banned partner's invitation", err, tally.ECodeNotFound)
	})
}

func TestInvitationExpiresAfterSevenDays(t *testing.T) {
	st := testenv.Bolt(t)
	ctx := context.Background()
	w := newWorld(t, st)
	p := w.partner(w.brand("Acme"), "ann@example.com", true)
	token := w.invite(p)
	w.clock.Advance(7*24*time.Hour - time.Second)
	if _, err := w.svc.Portal.Invitation(ctx, token); err != nil {
		t.Fatalf("a second before expiry: %v", err)
	}
	w.clock.Advance(time.Second)
	_, _, err := w.svc.Portal.AcceptInvite(ctx, token, pw)
	wantCode(t, "an expired invitation", err, tally.ECodeNotFound)
}

func TestOneInvitationSetsOnePassword(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		w := newWorld(t, st)
		p := w.partner(w.brand("Acme"), "ann@example.com", true)
		token := w.invite(p)
		const racers = 4
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Go(func() {
				_, _, errs[i] = w.svc.Portal.AcceptInvite(ctx, token, strings.Repeat("x", 12)+string(rune('a'+i)))
			})
		}
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won >= 0:
				t.Fatalf("racers %d and %d both set a password with one invitation", won, i)
			case err == nil:
				won = i
			default:
				wantCode(t, "a losing racer", err, tally.ECodeNotFound)
			}
		}
		if won < 0 {
			t.Fatal("no racer set a password")
		}
		if _, _, err := w.svc.Portal.SignIn(ctx, "ann@example.com", strings.Repeat("x", 12)+string(rune('a'+won))); err != nil {
			t.Errorf("the winner's password: %v", err)
		}
	})
}

// One address that is a partner of two brands has a password at each;
// each opens its own brand's portal, and neither brand's invitation
// changes the other's.
func TestOneAddressAtTwoBrands(t *testing.T) {
	st := testenv.Bolt(t)
	ctx := context.Background()
	w := newWorld(t, st)
	a := w.partner(w.brand("Acme"), "ann@example.com", true)
	b := w.partner(w.brand("Bolt"), "ann@example.com", true)
	if _, _, err := w.svc.Portal.AcceptInvite(ctx, w.invite(a), "password at acme"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := w.svc.Portal.AcceptInvite(ctx, w.invite(b), "password at bolt"); err != nil {
		t.Fatal(err)
	}
	for pw, want := range map[string]tally.Partner{"password at acme": a, "password at bolt": b} {
		_, sess, err := w.svc.Portal.SignIn(ctx, "ann@example.com", pw)
		if err != nil || sess.PartnerID != want.ID || sess.BrandID != want.BrandID {
			t.Errorf("signing in with %q: %+v, %v; want partner %s", pw, sess, err, want.ID)
		}
	}
}

// A brand that invites a partner again (the first link did not arrive)
// spends the earlier link, and a password set by a later link ends the
// sessions begun before it.
func TestLaterInvitationEndsEarlierOnes(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		w := newWorld(t, st)
		p := w.partner(w.brand("Acme"), "ann@example.com", true)
		first := w.invite(p)
		w.clock.Advance(time.Minute)
		second := w.invite(p)
		_, _, err := w.svc.Portal.AcceptInvite(ctx, first, pw)
		wantCode(t, "the earlier link", err, tally.ECodeNotFound)
		if _, err := w.svc.Portal.Invitation(ctx, first); err == nil {
			t.Error("the earlier link's page still offers to set a password")
		}
		w.clock.Advance(time.Minute)
		old, _, err := w.svc.Portal.AcceptInvite(ctx, second, pw)
		if err != nil {
			t.Fatal(err)
		}

		// Invited again: the new password ends the session of the old one.
		w.clock.Advance(time.Minute)
		third := w.invite(p)
		w.clock.Advance(time.Minute)
		own, _, err := w.svc.Portal.AcceptInvite(ctx, third, pw+" new")
		if err != nil {
			t.Fatal(err)
		}
		_, err = w.svc.Portal.Session(ctx, old)
		wantCode(t, "a session from before the new password", err, tally.ECodeUnauthorized)
		if _, err := w.svc.Portal.Session(ctx, own); err != nil {
			t.Errorf("the session of the new password: %v", err)
		}
		_, _, err = w.svc.Portal.SignIn(ctx, "ann@example.com", pw)
		wantCode(t, "the old password", err, tally.ECodeUnauthorized)
	})
}

// A ban and a reinstatement with no request between still end the
// partner's sessions.
func TestBanEndsSessionsEvenIfReinstatedFirst(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		w := newWorld(t, st)
		brand := w.brand("Acme")
		p := w.partner(brand, "ann@example.com", true)
		w.clock.Advance(time.Minute)
		token, _, err := w.svc.Portal.AcceptInvite(ctx, w.invite(p), pw)
		if err != nil {
			t.Fatal(err)
		}
		w.clock.Advance(time.Minute)
		if _, err := w.svc.Partners.BanPartner(ctx, brand, p.ID); err != nil {
			t.Fatal(err)
		}
		w.clock.Advance(time.Minute)
		if _, err := w.svc.Partners.ReactivatePartner(ctx, brand, p.ID); err != nil {
			t.Fatal(err)
		}
		_, err = w.svc.Portal.Session(ctx, token)
		wantCode(t, "a session from before the ban", err, tally.ECodeUnauthorized)
		if _, _, err := w.svc.Portal.SignIn(ctx, "ann@example.com", pw); err != nil {
			t.Errorf("signing in again once reinstated: %v", err)
		}
	})
}
