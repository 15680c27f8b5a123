package httpapi_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// hasRateHeaders reports whether an answer carries the three X-RateLimit-*
// headers.
func hasRateHeaders(r response) bool {
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
		if r.header.Get(h) == "" {
			return false
		}
	}
	return true
}

// withAuthorization sends a GET with the given Authorization header values
// (none for nil).
func (e *env) withAuthorization(path string, values ...string) response {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, v := range values {
		req.Header.Add("Authorization", v)
	}
	r, err := e.send(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func TestEveryAnswerCarriesRateLimitHeaders(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		// The counts below assume one window: stop the clock mid-minute.
		e := newEnv(t, st, httpapi.Config{RateLimit: 50}, service.WithClock(testenv.MidMinute().Now))
		_, key := e.brand()
		remaining := 50
		for _, c := range []struct {
			method, path string
			status       int
		}{
			{"GET", "/api/v1/offers", 200},
			{"GET", "/api/v1/offers/off_01jd0000000000000000000000", 404}, // no such record
			{"GET", "/api/v1/offerz", 404},                                // no such path
			{"GET", "/api/v1/offers/", 404},
			{"DELETE", "/api/v1/offers", 405},
			{"PUT", "/api/public/webhooks", 405},
			{"GET", "/api/v1/offers?limit=0", 422},
		} {
			r := e.call(c.method, c.path, key, nil)
			remaining--
			if r.status != c.status || r.errorCode() == "" && c.status != 200 {
				t.Errorf("%s %s: %d %s, want %d in the error shape", c.method, c.path, r.status, r.body, c.status)
			}
			// Each counts against the key, in order.
			if !hasRateHeaders(r) || r.header.Get("X-RateLimit-Remaining") != strconv.Itoa(remaining) {
				t.Errorf("%s %s (%d): X-RateLimit-Remaining %q, want %d", c.method, c.path, r.status, r.header.Get("X-RateLimit-Remaining"), remaining)
			}
		}
		// Without a key, where keys are needed: 401, counted per client IP,
		// with the challenge of RFC 9110 and RFC 6750.
		for _, c := range []struct{ method, path, auth, challenge string }{
			{"GET", "/api/v1/offers", "", `Bearer realm="tally"`},
			{"DELETE", "/api/v1/offers", "", `Bearer realm="tally"`},
			{"GET", "/api/v1/offerz", "", `Bearer realm="tally"`},
			{"GET", "/api/public/webhooks", "Bearer tally_sk_" + strings.Repeat("0", 48), `Bearer realm="tally", error="invalid_token"`},
		} {
			req, _ := http.NewRequest(c.method, e.srv.URL+c.path, nil)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			r, err := e.send(req)
			if err != nil {
				t.Fatal(err)
			}
			if r.status != 401 || r.errorCode() != "unauthorized" || !hasRateHeaders(r) || r.header.Get("WWW-Authenticate") != c.challenge {
				t.Errorf("%s %s without a valid key: %d %s rate headers %v WWW-Authenticate %q, want 401 with rate-limit headers and %q",
					c.method, c.path, r.status, r.body, hasRateHeaders(r), r.header.Get("WWW-Authenticate"), c.challenge)
			}
		}
		// Elsewhere an unknown path is a public read, counted per IP.
		if r := e.call("GET", "/nothing/here", "", nil); r.status != 404 || !hasRateHeaders(r) {
			t.Errorf("GET /nothing/here: %d %s, rate headers %v; want 404 with them", r.status, r.body, hasRateHeaders(r))
		}
	})
}

func TestRequestsWithoutAValidKeyAreRateLimitedPerIP(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 3}, service.WithClock(testenv.MidMinute().Now))
		_, key := e.brand()
		for i := range 3 {
			e.must(401, e.withAuthorization("/api/v1/offers", "Bearer tally_sk_"+strings.Repeat(strconv.Itoa(i), 48)))
		}
		r := e.withAuthorization("/api/v1/offers", "Bearer tally_sk_"+strings.Repeat("9", 48))
		if r.status != 429 || r.errorCode() != "rate_limit_exceeded" || r.header.Get("Retry-After") == "" {
			t.Errorf("fourth guess in a minute: %d %s Retry-After %q, want 429", r.status, r.body, r.header.Get("Retry-After"))
		}
		// A valid key has a budget of its own.
		e.must(200, e.call("GET", "/api/v1/offers", key, nil))
	})
}

func TestAuthorizationIsParsedAsRFC9110Says(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 1000})
		_, key := e.brand()
		for _, c := range []struct {
			name   string
			values []string
			status int
		}{
			{"canonical", []string{"Bearer " + key}, 200},
			{"lowercase scheme", []string{"bearer " + key}, 200},
			{"uppercase scheme", []string{"BEARER " + key}, 200},
			{"several spaces", []string{"Bearer   " + key}, 200},
			{"no scheme", []string{key}, 401},
			{"scheme only", []string{"Bearer"}, 401},
			{"another scheme", []string{"Basic " + key}, 401},
			{"token and more", []string{"Bearer " + key + " extra"}, 401},
			{"scheme glued to the key", []string{"Bearer" + key}, 401},
			{"two headers", []string{"Bearer " + key, "Bearer " + key}, 401},
		} {
			r := e.withAuthorization("/api/v1/offers", c.values...)
			if r.status != c.status {
				t.Errorf("%s: %d %s, want %d", c.name, r.status, r.body, c.status)
			}
			if c.status == 401 && !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer ") {
				t.Errorf("%s: 401 without WWW-Authenticate: Bearer (%q)", c.name, r.header.Get("WWW-Authenticate"))
			}
		}
	})
}

// TestRequestsTheRoutesNeverSee covers what the handler answers before
// routing: every answer is in the error shape, none an HTML redirect or a
// plain-text error.
func TestRequestsTheRoutesNeverSee(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 1000})
	_, key := e.brand()
	jsonError := func(what string, r response, status int, code string) {
		t.Helper()
		if r.status != status || r.errorCode() != code || r.header.Get("Content-Type") != "application/json" || r.header.Get("Location") != "" {
			t.Errorf("%s: %d %q Location %q: %s, want %d %s in the error shape", what, r.status, r.header.Get("Content-Type"), r.header.Get("Location"), r.body, status, code)
		}
	}
	noRedirect := *e.srv.Client()
	noRedirect.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	for _, path := range []string{"//api/v1/offers", "/api/v1/./offers", "/api/v1/x/../offers", "/api//v1/offers"} {
		req, _ := http.NewRequest("GET", e.srv.URL+path, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		r, _ := e.send(req)
		jsonError("GET "+path, r, 404, "not_found")
		if resp.StatusCode != 404 {
			t.Errorf("GET %s: %d, want 404 and no redirect", path, resp.StatusCode)
		}
	}
	// Headers over the limit, but under net/http's own.
	req, _ := http.NewRequest("GET", e.srv.URL+"/api/v1/offers", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("X-Padding", strings.Repeat("p", httpapi.MaxHeaderBytes))
	r, err := e.send(req)
	if err != nil {
		t.Fatal(err)
	}
	jsonError("oversized headers", r, 431, "headers_too_large")
	// A query string that url.Values would silently drop a pair of.
	jsonError("malformed query", e.call("GET", "/api/v1/offers?limit=%zz", key, nil), 422, "validation_error")
	jsonError("invalid UTF-8 in a query value", e.call("GET", "/api/v1/conversions?externalTxnId=%ff", key, nil), 422, "validation_error")
}
