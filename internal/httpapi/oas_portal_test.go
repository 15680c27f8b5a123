package httpapi_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/ids"
)

// oasPortal drives the partner portal's invitation through the document's
// every answer but 401 and 429 (the session's keyed calls make those) and
// returns the calls that need a key, for those. base is the server's
// {public_base_url}.
func oasPortal(t *testing.T, call, withKey func(oasCall) oasAnswer, base, active, banned, otherKey string) []oasCall {
	t.Helper()
	invite := "/api/v1/partners/" + active + "/invite"
	a := withKey(oasCall{method: "POST", path: invite, status: 201})
	inv := oasAs[httpapi.PortalInvite](t, a)
	token, ok := strings.CutPrefix(inv.InviteURL, base+"/portal/invite/")
	if !ok || len(token) < 40 {
		t.Errorf("invite URL %q, want %s/portal/invite/<token>", inv.InviteURL, base)
	}
	if want := time.Now().Add(7 * 24 * time.Hour); inv.ExpiresAt.Sub(want).Abs() > time.Minute {
		t.Errorf("invitation expires at %v, want 7 days from now", inv.ExpiresAt)
	}
	if cc := a.header.Get("Cache-Control"); cc != "no-store" {
		t.Errorf("invitation answered with Cache-Control %q, want no-store", cc)
	}
	again := oasAs[httpapi.PortalInvite](t, withKey(oasCall{method: "POST", path: invite, status: 201}))
	if again.InviteURL == inv.InviteURL {
		t.Error("two invitations have one link")
	}
	withKey(oasCall{method: "POST", path: "/api/v1/partners/" + banned + "/invite", status: 409, code: "invalid_transition"})
	withKey(oasCall{method: "POST", path: "/api/v1/partners/" + ids.New("prt_", time.Now()) + "/invite", status: 404, code: "not_found"})
	call(oasCall{method: "POST", path: invite, key: otherKey, status: 404, code: "not_found"})
	return []oasCall{{method: "POST", path: invite}}
}
