package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// nextCursor lists path and returns the page's nextCursor.
func (e *env) nextCursor(path, key string) string {
	e.t.Helper()
	var page struct{ NextCursor *string }
	e.must(200, e.call("GET", path, key, nil)).decode(e.t, &page)
	if page.NextCursor == nil {
		e.t.Fatalf("GET %s: no nextCursor", path)
	}
	return *page.NextCursor
}

// cursorPayload splits a cursor into its decoded JSON and its signature.
func cursorPayload(t *testing.T, c string) (map[string]any, string) {
	t.Helper()
	p64, mac, ok := strings.Cut(c, ".")
	raw, err := base64.RawURLEncoding.DecodeString(p64)
	var payload map[string]any
	if !ok || err != nil || json.Unmarshal(raw, &payload) != nil {
		t.Fatalf("cursor %q is not <base64url JSON>.<signature>", c)
	}
	return payload, mac
}

func encodePayload(v any) string {
	raw, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(raw)
}

// TestCursorsCannotBeForged tries what a client who knows the cursor format
// (everything but the deployment's secret) can do: every altered or made-up
// cursor answers 422, none 500, and none reads anything.
func TestCursorsCannotBeForged(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		_, otherKey := e.brand()
		for range 3 {
			e.offer(key, nil)
		}
		good := e.nextCursor("/api/v1/offers?limit=1", key)
		e.must(200, e.call("GET", "/api/v1/offers?limit=1&cursor="+good, key, nil))

		payload, mac := cursorPayload(t, good)
		last := payload["l"].([]any)[0].(string)
		with := func(sk string) string {
			p := map[string]any{"k": payload["k"], "l": []string{sk}, "d": []bool{false}}
			return encodePayload(p) + "." + mac
		}
		// The attack on the unkeyed fingerprint cursors once had: the
		// fingerprint of a list is computable from what the client knows.
		oldStyle := func(sk string) string {
			h := fnv.New64a()
			h.Write([]byte("\x00BRD#" + brandID + "\x00"))
			h.Write([]byte("OFF#\x00\x00\x00"))
			return encodePayload(map[string]any{"l": []string{sk}, "d": []bool{false}, "f": h.Sum64()})
		}
		long := "OFF#" + strings.Repeat("x", 1100)
		for name, c := range map[string]string{
			"a sort key of 1,100 bytes":              with(long),
			"a sort key with NUL":                    with("OFF#off_\x00"),
			"another offer's key":                    with(strings.Replace(last, last[len(last)-1:], "0", 1)),
			"another kind of record":                 with("SUB#sub_01jd0000000000000000000000"),
			"a made-up signature":                    encodePayload(payload) + "." + base64.RawURLEncoding.EncodeToString(make([]byte, 16)),
			"no signature":                           encodePayload(payload),
			"an unkeyed cursor with a long key":      oldStyle(long),
			"an unkeyed cursor with NUL":             oldStyle("OFF#\x00"),
			"an unkeyed cursor with a long OFF# key": oldStyle("OFF#" + strings.Repeat("z", 600)),
			"not base64":                             "%%%",
			"huge":                                   strings.Repeat("A", 10_000) + "." + mac,
		} {
			r := e.call("GET", "/api/v1/offers?limit=1&cursor="+urlEscape(c), key, nil)
			if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "cursor") {
				t.Errorf("%s: %d %.300s, want 422 naming the cursor", name, r.status, r.body)
			}
		}
		// A real cursor works only for the list, brand and filters it came
		// from.
		for _, c := range []struct{ path, key string }{
			{"/api/v1/offers?limit=1&cursor=" + good, otherKey},
			{"/api/v1/partners?limit=1&cursor=" + good, key},
			{"/api/public/webhooks?limit=1&cursor=" + good, key},
		} {
			if r := e.call("GET", c.path, c.key, nil); r.status != 422 {
				t.Errorf("GET %s with another list's cursor: %d %s, want 422", c.path, r.status, r.body)
			}
		}
	})
}

func urlEscape(s string) string {
	return strings.NewReplacer("%", "%25", "&", "%26", "+", "%2B", "#", "%23", " ", "%20", "\x00", "%00").Replace(s)
}

// TestCursorKeysRotateWithoutBreakingLiveCursors: the signing key changes
// every 30 days by itself, shared by every instance on the store; a cursor
// keeps working a week past its key's rotation, then answers 422.
func TestCursorKeysRotateWithoutBreakingLiveCursors(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(time.Now())
		a := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithClock(clock.Now))
		b := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithClock(clock.Now)) // another instance
		_, key := a.brand()
		for range 3 {
			a.offer(key, nil)
		}
		old := a.nextCursor("/api/v1/offers?limit=1", key)
		oldKey, _ := cursorPayload(t, old)
		// Another instance accepts it: the keyring is the store's.
		b.must(200, b.call("GET", "/api/v1/offers?limit=1&cursor="+old, key, nil))

		clock.Advance(31 * 24 * time.Hour)
		fresh := a.nextCursor("/api/v1/offers?limit=1", key)
		freshKey, _ := cursorPayload(t, fresh)
		if freshKey["k"] == oldKey["k"] {
			t.Fatalf("after 31 days cursors are still signed with key %v", oldKey["k"])
		}
		// b has the old keyring cached, yet takes a cursor of the new key.
		b.must(200, b.call("GET", "/api/v1/offers?limit=1&cursor="+fresh, key, nil))
		for _, e := range []*env{a, b} {
			e.must(200, e.call("GET", "/api/v1/offers?limit=1&cursor="+old, key, nil)) // still live
		}

		clock.Advance(7 * 24 * time.Hour) // 38 days after the old key began
		for _, e := range []*env{a, b} {
			r := e.call("GET", "/api/v1/offers?limit=1&cursor="+old, key, nil)
			if r.status != 422 || !strings.Contains(string(r.body), "expired") {
				t.Errorf("a cursor of a key retired a week ago: %d %s, want 422 expired", r.status, r.body)
			}
			e.must(200, e.call("GET", "/api/v1/offers?limit=1&cursor="+fresh, key, nil))
		}
	})
}

// TestConcurrentFirstListsShareOneKey: instances that list at once on a new
// store agree on one signing key (the keyring is created once).
func TestConcurrentFirstListsShareOneKey(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		seed := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		_, key := seed.brand()
		for range 2 {
			seed.offer(key, nil)
		}
		envs := make([]*env, 8)
		for i := range envs {
			envs[i] = newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		}
		cursors := make(chan string, len(envs))
		errs := make(chan error, len(envs))
		for _, e := range envs {
			go func() {
				r, err := e.try("GET", "/api/v1/offers?limit=1", key, nil)
				var page struct{ NextCursor *string }
				if err == nil && (r.status != 200 || json.Unmarshal(r.body, &page) != nil || page.NextCursor == nil) {
					err = fmt.Errorf("%d %s", r.status, r.body)
				}
				if err != nil {
					errs <- err
					return
				}
				cursors <- *page.NextCursor
			}()
		}
		keys := map[any]bool{}
		for range envs {
			select {
			case err := <-errs:
				t.Fatal(err)
			case c := <-cursors:
				p, _ := cursorPayload(t, c)
				keys[p["k"]] = true
				// Every instance takes every other's cursor.
				for _, e := range envs {
					e.must(200, e.call("GET", "/api/v1/offers?limit=1&cursor="+c, key, nil))
				}
			}
		}
		if len(keys) != 1 {
			t.Errorf("racing first lists signed with %d keys, want 1", len(keys))
		}
	})
}
