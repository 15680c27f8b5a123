package cli_test

import "testing"

// TestServeAnswersHealthProbes: tally serve answers the load balancers'
// probes without a key.
func TestServeAnswersHealthProbes(t *testing.T) {
	t.Parallel()
	s := serve(t, env(), "--data", t.TempDir())
	for _, path := range []string{"/healthz", "/readyz"} {
		if got := s.call(t, "GET", path, "", nil).expect(t, "GET "+path, 200).object(t)["status"]; got != "ok" {
			t.Errorf("GET %s: status %v, want ok", path, got)
		}
	}
}
