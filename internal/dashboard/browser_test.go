package dashboard_test

// The pages in a real headless Chromium, driven through browsertest
// against the dashboard on loopback: what a person sees, at 1280 and at
// 390 px wide. Each test signs in to its own site. Screenshots of the
// embedded store's runs go to screenshots/ at the repository root
// (gitignored), to look at.

import (
	"testing"

	"github.com/tally-hq/tally/internal/browsertest"
)

// newTab opens the browser's tab on s signed in as its owner.
func (s *site) newTab(t *testing.T) *browsertest.Tab {
	t.Helper()
	b := browsertest.NewTab(t, s.srv.URL)
	b.Open("/dashboard/sign-in")
	b.Fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": "owner@acme.example", "password": pw})
	b.Submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard$`)
	return b
}
