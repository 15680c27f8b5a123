package service_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestUsersSignInAndSessions(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		pw := "correct horse battery"
		u, err := f.svc.Accounts.CreateUser(f.ctx, accounts.UserInput{BrandID: ptr(f.brandID), Email: ptr("  Owner@Acme.example "), Password: &pw})
		if err != nil {
			t.Fatal(err)
		}
		if u.Email != "owner@acme.example" || u.BrandID != f.brandID || !strings.HasPrefix(u.ID, "usr_") {
			t.Errorf("user %+v", u)
		}
		// One user per address, whatever the case and whatever the brand.
		other, err := f.svc.Identity.CreateBrand(f.ctx, "Other")
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.svc.Accounts.CreateUser(f.ctx, accounts.UserInput{BrandID: &other.ID, Email: ptr("OWNER@acme.example"), Password: &pw})
		if tally.ErrorCode(err) != tally.ECodeConflict {
			t.Errorf("a second user with the address: %v, want conflict", err)
		}
		for name, in := range map[string]accounts.UserInput{
			"short password": {BrandID: &f.brandID, Email: ptr("a@acme.example"), Password: ptr("short")},
			"no password":    {BrandID: &f.brandID, Email: ptr("a@acme.example")},
			"bad email":      {BrandID: &f.brandID, Email: ptr("not an address"), Password: &pw},
			"no brand":       {Email: ptr("a@acme.example"), Password: &pw},
		} {
			if _, err := f.svc.Accounts.CreateUser(f.ctx, in); tally.ErrorCode(err) != tally.ECodeValidation {
				t.Errorf("%s: %v, want a validation error", name, err)
			}
		}
		if _, err := f.svc.Accounts.CreateUser(f.ctx, accounts.UserInput{BrandID: ptr("brd_01kb7k3m5n6p7q8r9s0t1v2w3x"), Email: ptr("a@acme.example"), Password: &pw}); tally.ErrorCode(err) != tally.ECodeNotFound {
			t.Errorf("an unknown brand: %v, want not_found", err)
		}

		// Sign-in: the right password, in any case of the address; anything
		// else gets the same answer.
		if got, err := f.svc.Accounts.SignIn(f.ctx, "OWNER@acme.example", pw); err != nil || got.ID != u.ID {
			t.Fatalf("sign in: %+v, %v", got, err)
		}
		var msgs []string
		for _, c := range [][2]string{{"owner@acme.example", pw + "!"}, {"nobody@acme.example", pw}, {"", ""}, {"owner@acme.example", ""}} {
			_, err := f.svc.Accounts.SignIn(f.ctx, c[0], c[1])
			if tally.ErrorCode(err) != tally.ECodeUnauthorized {
				t.Errorf("sign in %q: %v, want unauthorized", c[0], err)
			}
			msgs = append(msgs, tally.ErrorMessage(err))
		}
		if msgs[0] != msgs[1] {
			t.Errorf("a wrong password (%q) and an unknown address (%q) answer differently", msgs[0], msgs[1])
		}

		// Sessions: found by token until they end or expire.
		token, sess, err := f.svc.Accounts.StartSession(f.ctx, u)
		if err != nil || sess.BrandID != f.brandID || sess.UserID != u.ID {
			t.Fatalf("session %+v, %v", sess, err)
		}
		token2, _, err := f.svc.Accounts.StartSession(f.ctx, u)
		if err != nil || token2 == token || len(token) < 40 {
			t.Fatalf("tokens %q %q, %v", token, token2, err)
		}
		if got, err := f.svc.Accounts.Session(f.ctx, token); err != nil || got.UserID != u.ID {
			t.Fatalf("session by token: %+v, %v", got, err)
		}
		for _, bad := range []string{"", "nope", token + "x", strings.Repeat("a", 200)} {
			if _, err := f.svc.Accounts.Session(f.ctx, bad); tally.ErrorCode(err) != tally.ECodeUnauthorized {
				t.Errorf("session %q: %v, want unauthorized", bad, err)
			}
		}
		if err := f.svc.Accounts.EndSession(f.ctx, token); err != nil {
			t.Fatal(err)
		}
		if _, err := f.svc.Accounts.Session(f.ctx, token); tally.ErrorCode(err) != tally.ECodeUnauthorized {
			t.Errorf("an ended session: %v", err)
		}
		if _, err := f.svc.Accounts.Session(f.ctx, token2); err != nil {
			t.Errorf("ending one session ended another: %v", err)
		}
		f.clock.Advance(accounts.SessionTTL)
		if _, err := f.svc.Accounts.Session(f.ctx, token2); tally.ErrorCode(err) != tally.ECodeUnauthorized {
			t.Errorf("a session %v old: %v, want unauthorized", accounts.SessionTTL, err)
		}

		users, _, err := f.svc.Accounts.Users(f.ctx, f.brandID, records.ListParams{})
		if err != nil || len(users) != 1 || users[0].ID != u.ID {
			t.Errorf("users: %+v, %v", users, err)
		}
	})
}

// Creating the same address at once from many requests makes one user.
func TestConcurrentUserCreationMakesOne(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[string]int{}
		for range 8 {
			wg.Go(func() {
				_, err := f.svc.Accounts.CreateUser(f.ctx, accounts.UserInput{BrandID: &f.brandID, Email: ptr("race@acme.example"), Password: ptr("a long enough password")})
				outcome := "created"
				if err != nil {
					outcome = tally.ErrorCode(err)
				}
				mu.Lock()
				codes[outcome]++
				mu.Unlock()
			})
		}
		wg.Wait()
		if codes["created"] != 1 || codes[tally.ECodeConflict] != 7 {
			t.Errorf("outcomes %v: want 1 user and 7 conflicts", codes)
		}
	})
}

// Sign-in attempts are throttled with AllowPer's longer windows.
func TestAllowPerWindow(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	f.clock.Set(start.Add(time.Minute))
	for i := range 4 {
		d, err := f.svc.Limits.AllowPer(f.ctx, "signin:x", 3, 15*time.Minute)
		if err != nil || d.Allowed != (i < 3) {
			t.Errorf("attempt %d: %+v, %v", i+1, d, err)
		}
		if i == 3 && d.Wait != 14*time.Minute {
			t.Errorf("wait %v, want 14m (the window ends at 10:15)", d.Wait)
		}
	}
	f.clock.Set(start.Add(15 * time.Minute))
	if d, _ := f.svc.Limits.AllowPer(f.ctx, "signin:x", 3, 15*time.Minute); !d.Allowed {
		t.Error("the next window refused")
	}
}
