package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

type createdKey struct {
	tally.APIKey
	Key string `json:"key"`
}

type keyList struct {
	Data       []map[string]any `json:"data"`
	NextCursor *string          `json:"nextCursor"`
}

func TestKeysOverTheAPI(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{})
		brandID, key := e.brand()
		otherBrand, otherKey := e.brand()

		var ci createdKey
		e.must(201, e.call("POST", "/api/v1/keys", key, map[string]any{"name": "  CI deploys "})).decode(t, &ci)
		if ci.Name != "CI deploys" || ci.BrandID != brandID || !strings.HasPrefix(ci.Key, "tally_sk_") ||
			!strings.HasPrefix(ci.Key, ci.Prefix) || ci.LastUsedAt != nil || ci.RevokedAt != nil {
			t.Fatalf("created key: %+v", ci)
		}
		var unnamed createdKey
		e.must(201, e.call("POST", "/api/v1/keys", key, map[string]any{})).decode(t, &unnamed)

		// The list never shows a secret or its hash; the new key is first.
		listed := e.must(200, e.call("GET", "/api/v1/keys", key, nil))
		if strings.Contains(string(listed.body), ci.Key) || strings.Contains(string(listed.body), "hash") {
			t.Fatalf("the key list shows a secret: %s", listed.body)
		}
		var keys keyList
		listed.decode(t, &keys)
		if len(keys.Data) != 3 || keys.Data[0]["id"] != unnamed.ID || keys.Data[1]["id"] != ci.ID || keys.Data[1]["lastUsedAt"] != nil {
			t.Fatalf("keys: %s", listed.body)
		}
		// The brand's first key has been used (to list them); the others not yet.
		if keys.Data[2]["lastUsedAt"] == nil {
			t.Errorf("the key in use has no lastUsedAt: %v", keys.Data[2])
		}

		// The new key works, and now shows when it was used.
		e.must(200, e.call("GET", "/api/v1/offers", ci.Key, nil))
		e.must(200, e.call("GET", "/api/v1/keys", key, nil)).decode(t, &keys)
		if keys.Data[1]["lastUsedAt"] == nil {
			t.Errorf("after a request the key shows no lastUsedAt: %v", keys.Data[1])
		}

		// Another brand cannot see or delete it.
		e.must(404, e.call("DELETE", "/api/v1/keys/"+ci.ID, otherKey, nil))
		e.must(200, e.call("GET", "/api/v1/keys", otherKey, nil)).decode(t, &keys)
		if len(keys.Data) != 1 || keys.Data[0]["brandId"] != otherBrand {
			t.Errorf("the other brand's keys: %v", keys.Data)
		}
		e.must(200, e.call("GET", "/api/v1/offers", ci.Key, nil))

		// Deleted: refused at once, gone from the list, and a second delete is 404.
		var revoked tally.APIKey
		e.must(200, e.call("DELETE", "/api/v1/keys/"+ci.ID, key, nil)).decode(t, &revoked)
		if revoked.ID != ci.ID || revoked.RevokedAt == nil {
			t.Errorf("deleted key: %+v", revoked)
		}
		if r := e.call("GET", "/api/v1/offers", ci.Key, nil); r.status != 401 || r.errorCode() != "unauthorized" {
			t.Errorf("a deleted key: %d %s", r.status, r.body)
		}
		e.must(200, e.call("GET", "/api/v1/keys", key, nil)).decode(t, &keys)
		if len(keys.Data) != 2 || keys.Data[0]["id"] != unnamed.ID {
			t.Errorf("keys after the delete: %v", keys.Data)
		}
		e.must(404, e.call("DELETE", "/api/v1/keys/"+ci.ID, key, nil))
		e.must(404, e.call("DELETE", "/api/v1/keys/not-a-key", key, nil))

		// A key can delete itself; it stops at once.
		var self tally.APIKey
		e.must(200, e.call("GET", "/api/v1/keys", unnamed.Key, nil))
		e.must(200, e.call("DELETE", "/api/v1/keys/"+unnamed.ID, unnamed.Key, nil)).decode(t, &self)
		e.must(401, e.call("GET", "/api/v1/keys", unnamed.Key, nil))

		for _, body := range []any{
			map[string]any{"name": strings.Repeat("k", 101)},
			map[string]any{"name": 7},
			map[string]any{"name": "x", "scopes": []string{"read"}},
		} {
			if r := e.call("POST", "/api/v1/keys", key, body); r.status != 422 || r.errorCode() != "validation_error" {
				t.Errorf("POST /keys %v: %d %s", body, r.status, r.body)
			}
		}
	})
}

// keyWrites counts the writes the store gets for API key items.
type keyWrites struct {
	store.Store
	mu sync.Mutex
	n  int
}

func (k *keyWrites) Update(ctx context.Context, op store.Op) (store.Item, error) {
	if strings.HasPrefix(op.Key.PK, "KEY#") {
		k.mu.Lock()
		k.n++
		k.mu.Unlock()
	}
	return k.Store.Update(ctx, op)
}

func (k *keyWrites) take() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := k.n
	k.n = 0
	return n
}

// lastUsedAt is noted at most once a minute per key, even when requests
// race on two instances, and moves on when the key is used again later.
func TestKeyLastUsedIsNotAWritePerRequest(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		counted := &keyWrites{Store: st}
		clock := testenv.NewClock(time.Now().Truncate(time.Minute).Add(5 * time.Second))
		a := newEnv(t, counted, httpapi.Config{RateLimit: 1000}, service.WithClock(clock.Now))
		b := newEnv(t, counted, httpapi.Config{RateLimit: 1000}, service.WithClock(clock.Now))
		_, key := a.brand()
		counted.take()

		_, statuses := a.raceCalls(40, "GET", "/api/v1/offers", key, nil)
		_, statusesB := b.raceCalls(40, "GET", "/api/v1/offers", key, nil)
		if statuses[200] != 40 || statusesB[200] != 40 {
			t.Fatalf("statuses %v %v", statuses, statusesB)
		}
		if n := counted.take(); n < 1 || n > 2 {
			t.Errorf("80 requests on 2 instances made %d lastUsedAt writes, want 1 (2 when both race for it)", n)
		}
		first := lastUsed(t, a, key)
		if !first.Equal(clock.Now()) {
			t.Errorf("lastUsedAt %v, want %v", first, clock.Now())
		}

		clock.Advance(30 * time.Second)
		a.must(200, a.call("GET", "/api/v1/offers", key, nil))
		if n := counted.take(); n != 0 {
			t.Errorf("a use 30 s later wrote lastUsedAt %d times, want 0", n)
		}
		clock.Advance(31 * time.Second)
		a.must(200, a.call("GET", "/api/v1/offers", key, nil))
		if n := counted.take(); n != 1 {
			t.Errorf("a use 61 s after the note wrote lastUsedAt %d times, want 1", n)
		}
		if got := lastUsed(t, a, key); !got.Equal(clock.Now()) {
			t.Errorf("lastUsedAt %v after a later use, want %v", got, clock.Now())
		}
	})
}

func lastUsed(t *testing.T, e *env, key string) time.Time {
	t.Helper()
	var keys struct{ Data []tally.APIKey }
	e.must(200, e.call("GET", "/api/v1/keys", key, nil)).decode(t, &keys)
	if len(keys.Data) != 1 || keys.Data[0].LastUsedAt == nil {
		t.Fatalf("keys: %+v", keys.Data)
	}
	return keys.Data[0].LastUsedAt.Time
}

// POST /keys takes only optional fields, so a request without a body
// (curl -X POST, no -d and no Content-Type) makes an unnamed key, as {}
// does. A route whose body is required answers such a request that its
// body is empty, not that its (absent) Content-Type is wrong.
func TestBodylessPOSTWorksWhereTheBodyIsOptional(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000})
	brandID, key := e.brand()
	post := func(path, contentType string) response {
		t.Helper()
		req, err := http.NewRequest("POST", e.srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		r, err := e.send(req)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, contentType := range []string{"", "application/json", "text/plain"} {
		var k createdKey
		e.must(201, post("/api/v1/keys", contentType)).decode(t, &k)
		if k.BrandID != brandID || k.Name != "" || !strings.HasPrefix(k.Key, "tally_sk_") {
			t.Fatalf("bodyless POST /keys (Content-Type %q): %+v", contentType, k)
		}
		e.must(200, e.call("GET", "/api/v1/offers", k.Key, nil))
	}
	// A body that is there is still read strictly.
	if r := e.call("POST", "/api/v1/keys", key, `{"name":`); r.status != 400 || r.errorCode() != "invalid_json" {
		t.Errorf("POST /keys with a broken body: %d %s, want 400 invalid_json", r.status, r.body)
	}
	if r := e.call("POST", "/api/v1/keys?name=x", key, nil); r.status != 422 || !strings.Contains(string(r.body), "Unknown query parameter") {
		t.Errorf("bodyless POST /keys?name=x: %d %s, want 422 naming the parameter", r.status, r.body)
	}

	sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": "https://hooks.example.com/x", "events": []string{"cap.reached"}})).field(t, "id")
	for _, path := range []string{"/api/v1/offers", "/api/v1/conversions", "/api/public/webhooks", "/api/v1/fraud/blocked-ips",
		"/api/public/webhooks/" + sub + "/recover", "/api/public/brands/" + brandID + "/applications"} {
		if r := post(path, ""); r.status != 400 || r.errorCode() != "invalid_json" || !strings.Contains(string(r.body), "body is empty") {
			t.Errorf("bodyless POST %s: %d %s, want 400 invalid_json saying the body is empty", path, r.status, r.body)
		}
	}
	var keys keyList
	e.must(200, e.call("GET", "/api/v1/keys", key, nil)).decode(t, &keys)
	if len(keys.Data) != 4 {
		t.Errorf("%d keys, want the first and the three made without a body", len(keys.Data))
	}
}
