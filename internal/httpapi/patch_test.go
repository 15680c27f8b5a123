package httpapi_test

import (
	"bytes"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// TestPatchChangesOnlyWhatItNames holds both PATCH routes to one rule, as
// Stripe's updates behave: an empty object, or the values a record already
// has, answer 200 with the record unchanged (updatedAt included); a field
// given as null is refused with 422 rather than read as left out, and so is
// a body that is not an object; a refused body changes nothing.
func TestPatchChangesOnlyWhatItNames(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		_, key := e.brand()
		offer := "/api/v1/offers/" + e.offer(key, map[string]any{"caps": map[string]any{"daily": 5}})
		hook := "/api/public/webhooks/" + e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{
			"url": "https://hooks.example.com/in", "events": []string{"conversion.created"}, "secret": "whsec_0123456789abcdef",
		})).field(t, "id")

		for _, c := range []struct {
			path  string
			same  map[string]any // the values it has
			nulls []string
		}{
			{offer, map[string]any{"name": "Shoes", "currency": "USD", "caps": map[string]any{"daily": 5}},
				[]string{"name", "status", "caps", "holdHours", "revenueCents", "attributionWindowDays"}},
			{hook, map[string]any{"url": "https://hooks.example.com/in", "events": []string{"conversion.created"}, "secret": "whsec_0123456789abcdef"},
				[]string{"url", "events", "secret"}},
		} {
			before := e.must(200, e.call("GET", c.path, key, nil)).body
			unchanged := func(what string, r response) {
				t.Helper()
				if now := e.must(200, e.call("GET", c.path, key, nil)).body; !bytes.Equal(now, before) {
					t.Errorf("PATCH %s %s changed it: %s, was %s", c.path, what, now, before)
				}
				if r.status == 200 && !bytes.Equal(r.body, before) {
					t.Errorf("PATCH %s %s answered %s, want it as it is: %s", c.path, what, r.body, before)
				}
			}
			for _, body := range []any{map[string]any{}, c.same} {
				unchanged("with nothing to change", e.must(200, e.call("PATCH", c.path, key, body)))
			}
			for _, name := range c.nulls {
				r := e.call("PATCH", c.path, key, map[string]any{name: nil})
				if r.status != 422 || r.errorCode() != "validation_error" || !bytes.Contains(r.body, []byte(name+" cannot be null")) {
					t.Errorf("PATCH %s {%q: null}: %d %s, want 422 saying it cannot be null", c.path, name, r.status, r.body)
				}
				unchanged("with a null", r)
			}
			for _, raw := range []string{"null", "[]", `"x"`, "1"} {
				r := e.call("PATCH", c.path, key, raw)
				if r.status != 422 || r.errorCode() != "validation_error" {
					t.Errorf("PATCH %s %s: %d %s, want 422", c.path, raw, r.status, r.body)
				}
				unchanged("with "+raw, r)
			}
		}
		// A null inside caps still removes that cap.
		e.must(200, e.call("PATCH", offer, key, map[string]any{"caps": map[string]any{"daily": nil}}))
		if caps := e.must(200, e.call("GET", offer, key, nil)).body; !bytes.Contains(caps, []byte(`"daily":null`)) {
			t.Errorf("caps.daily: null left the cap: %s", caps)
		}
	})
}
