package cli_test

import (
	"fmt"
	"testing"
)

// TestStartupMistakesSayWhatToDo: what a new user following the README
// runs into first (a second `make run`, something else on port 8080, a
// command without its flag) names the way out, not only the system's error.
func TestStartupMistakesSayWhatToDo(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := serve(t, env(), "--data", dir)

	// The same folder: the store is the running server's.
	tallyFails(t, env(), []string{"serve", "--addr", fmt.Sprintf("127.0.0.1:%d", freePort(t)), "--data", dir},
		"another tally process", "--data")
	// Another folder, the same address.
	tallyFails(t, env(), []string{"serve", "--addr", s.addr, "--data", t.TempDir()},
		s.addr, "--addr")
	// tally listen on a port in use.
	tallyFails(t, env(), []string{"listen", "--port", s.addr[len("127.0.0.1:"):], "--secret", "whsec_at_least_16_chars"}, "--port")
	// A brand needs its name, said as the other commands say theirs.
	tallyFails(t, env(), []string{"brands", "create", "--data", dir}, "brands create needs --name")
	// The running server still serves.
	s.call(t, "GET", "/api/public/webhook-events", "", nil).expect(t, "the catalog", 200)
}
