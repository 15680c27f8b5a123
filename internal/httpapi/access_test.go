package httpapi_test

import (
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestUnauthenticatedRequestsAreRefused(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{})
	_, key := e.brand()
	for name, auth := range map[string]string{
		"missing":      "",
		"wrong scheme": "Basic " + key,
		"unknown key":  "Bearer tally_sk_" + strings.Repeat("0", 48),
		"garbage":      "Bearer 12345",
	} {
		for _, path := range []string{"/api/v1/offers", "/api/v1/partners", "/api/v1/conversions", "/api/v1/reports"} {
			req := e.call("GET", path, "", nil)
			if auth != "" {
				r, err := rawGet(e, path, auth)
				if err != nil {
					t.Fatal(err)
				}
				req = r
			}
			if req.status != 401 || req.errorCode() != "unauthorized" {
				t.Errorf("%s key on %s: %d %s, want 401 unauthorized", name, path, req.status, req.body)
			}
		}
	}
}

func rawGet(e *env, path, authorization string) (response, error) {
	req, err := http.NewRequest("GET", e.srv.URL+path, nil)
	if err != nil {
		return response{}, err
	}
	req.Header.Set("Authorization", authorization)
	return e.send(req)
}

func TestRevokedKeyStopsWorkingOnEveryInstance(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(time.Now())
		a := newEnv(t, st, httpapi.Config{}, service.WithClock(clock.Now))
		b := newEnv(t, st, httpapi.Config{}, service.WithClock(clock.Now)) // another instance, same table
		brandID, key := a.brand()
		b.must(200, b.call("GET", "/api/v1/offers", key, nil)) // b now has the key cached

		keys, _, err := a.svc.Identity.APIKeys(context.Background(), brandID, records.ListParams{})
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys = %v, %v", keys, err)
		}
		if _, err := a.svc.Identity.RevokeAPIKey(context.Background(), keys[0].ID); err != nil {
			t.Fatal(err)
		}
		a.must(401, a.call("GET", "/api/v1/offers", key, nil)) // the revoking instance: at once
		clock.Advance(30*time.Second + time.Millisecond)
		b.must(401, b.call("GET", "/api/v1/offers", key, nil)) // any other: within 30 s (the bound is 60)
	})
}

func TestRateLimitIsExactUnderConcurrency(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		testRateLimitIsExact(t, st)
	})
	// The local server on the embedded store counts in its own memory.
	t.Run("process", func(t *testing.T) { testRateLimitIsExact(t, testenv.Bolt(t), service.WithProcessRateLimits()) })
}

func testRateLimitIsExact(t *testing.T, st store.Store, opts ...service.Option) {
	// Mid-window, so the race cannot straddle two windows.
	clock := testenv.MidMinute()
	e := newEnv(t, st, httpapi.Config{}, append(opts, service.WithClock(clock.Now))...)
	_, key := e.brand()
	_, other := e.brand()

	answers, statuses := e.raceCalls(130, "GET", "/api/v1/offers", key, nil)
	limited := slices.DeleteFunc(answers, func(r response) bool { return r.status != 429 })
	if statuses[200] != 100 || statuses[429] != 30 {
		t.Errorf("statuses = %v, want exactly 100 200s and 30 429s", statuses)
	}
	for _, r := range limited {
		if r.errorCode() != "rate_limit_exceeded" || r.header.Get("Retry-After") != "40" || r.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("429 answer: code %q Retry-After %q remaining %q, want rate_limit_exceeded, 40, 0",
				r.errorCode(), r.header.Get("Retry-After"), r.header.Get("X-RateLimit-Remaining"))
			break
		}
	}
	ok := e.must(200, e.call("GET", "/api/v1/offers", other, nil))
	if ok.header.Get("X-RateLimit-Limit") != "100" || ok.header.Get("X-RateLimit-Remaining") != "99" ||
		ok.header.Get("X-RateLimit-Reset") != strconv.FormatInt(clock.Now().Truncate(time.Minute).Add(time.Minute).Unix(), 10) {
		t.Errorf("another key's headers: %v", ok.header)
	}
	clock.Advance(40 * time.Second) // the next window
	e.must(200, e.call("GET", "/api/v1/offers", key, nil))
}

func TestApplicationsAreRateLimitedPerClientIP(t *testing.T) {
	// Mid-window, so the four applications cannot straddle two windows.
	clock := testenv.MidMinute()
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{ApplicationRateLimit: 3}, service.WithClock(clock.Now))
	brandID, _ := e.brand()
	for i := range 4 {
		r := e.call("POST", "/api/public/brands/"+brandID+"/applications", "", map[string]any{"name": "P", "email": "p" + strconv.Itoa(i) + "@example.com"})
		if want := map[bool]int{true: 201, false: 429}[i < 3]; r.status != want {
			t.Errorf("application %d: %d %s, want %d", i+1, r.status, r.body, want)
		}
	}
}
