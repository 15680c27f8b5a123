package httpapi_test

import (
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// Each key has a rate limit of its own, so a brand minting keys without
// bound would multiply its limit: a brand has at most 25 active keys, even
// when many are asked for at once, and a revoked key makes room for one
// more, once however many revoke it together.
func TestABrandHasAtMost25ActiveKeys(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		_, key := e.brand() // one active key already
		answers, statuses := e.raceCalls(40, "POST", "/api/v1/keys", key, func(int) any { return map[string]any{} })
		if statuses[201] != 25-1 || statuses[409] != 40-statuses[201] {
			t.Fatalf("40 keys asked for at once with 1 active: %v, want %d created and the rest 409", statuses, 25-1)
		}
		var created []string
		for _, a := range answers {
			switch a.status {
			case 201:
				created = append(created, a.field(t, "key"))
			case 409:
				if msg := errorMessage(a); a.errorCode() != "conflict" || !strings.Contains(msg, "at most 25 active API keys") {
					t.Errorf("the 26th key: %s, want conflict saying the limit", a.body)
				}
			}
		}
		if got := e.listAll("/api/v1/keys", key); len(got) != 25 {
			t.Errorf("GET /keys lists %d keys, want %d", len(got), 25)
		}
		// Every one made works.
		for _, k := range created {
			e.must(200, e.call("GET", "/api/v1/offers", k, nil))
		}

		// Revoking one key at once from many requests frees one place.
		victim := e.listAll("/api/v1/keys", key)[0]
		_, statuses = e.raceCalls(10, "DELETE", "/api/v1/keys/"+victim, key, nil)
		if statuses[200] != 1 || statuses[404] != 9 {
			t.Errorf("10 revocations of one key at once: %v, want one 200 and 404s", statuses)
		}
		_, statuses = e.raceCalls(5, "POST", "/api/v1/keys", key, func(int) any { return map[string]any{} })
		if statuses[201] != 1 || statuses[409] != 4 {
			t.Errorf("5 keys asked for with one place free: %v, want one created", statuses)
		}
	})
}
