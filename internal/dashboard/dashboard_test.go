package dashboard_test

// The dashboard over real HTTP on loopback, without a browser: the rules a
// script could test (headers, cookies, redirects, CSRF, throttling). The
// pages as a person uses them are tested in a browser by
// internal/cli/dashboard_e2e_test.go.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// TestMain stops DynamoDB Local and the browser the tests started.
func TestMain(m *testing.M) {
	code := dynamotest.Run(m)
	browsertest.Stop()
	os.Exit(code)
}

type site struct {
	t       testing.TB
	srv     *httptest.Server
	svc     *service.Service
	brandID string
}

const pw = "correct horse battery staple"

func newSite(t testing.TB, st store.Store, cfg httpapi.Config, opts ...service.Option) *site {
	t.Helper()
	cfg.Logger = slog.New(slog.DiscardHandler)
	svc := servicetest.New(st, opts...)
	cfg.Dashboard = dashboard.New(svc.API(), cfg)
	srv := httptest.NewServer(httpapi.New(svc.API(), cfg).Handler())
	t.Cleanup(srv.Close)
	b, err := svc.Identity.CreateBrand(context.Background(), "Acme")
	if err != nil {
		t.Fatal(err)
	}
	email := "owner@acme.example"
	if _, err := svc.Accounts.CreateUser(context.Background(), accounts.UserInput{BrandID: &b.ID, Email: &email, Password: ptr(pw)}); err != nil {
		t.Fatal(err)
	}
	return &site{t: t, srv: srv, svc: svc, brandID: b.ID}
}

func ptr[T any](v T) *T { return &v }

func client(t testing.TB) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type page struct {
	status int
	header http.Header
	body   string
}

func (s *site) do(c *http.Client, req *http.Request) page {
	s.t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return page{resp.StatusCode, resp.Header, string(b)}
}

func (s *site) get(c *http.Client, path string) page {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL+path, nil)
	return s.do(c, req)
}

func (s *site) post(c *http.Client, path string, form url.Values, header ...string) page {
	s.t.Helper()
	req, _ := http.NewRequest("POST", s.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return s.do(c, req)
}

var tokenRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

func token(t testing.TB, p page) string {
	t.Helper()
	m := tokenRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token on the page (status %d)", p.status)
	}
	return m[1]
}

// signIn signs c in and returns the CSRF token of its session's forms.
func (s *site) signIn(c *http.Client, next string) page {
	s.t.Helper()
	tok := token(s.t, s.get(c, "/dashboard/sign-in"))
	return s.post(c, "/dashboard/sign-in", url.Values{"csrf": {tok}, "email": {"owner@acme.example"}, "password": {pw}, "next": {next}})
}

func TestPagesNeedASession(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		c := client(t)
		p := s.get(c, "/dashboard/conversions?status=pending")
		if p.status != 303 || p.header.Get("Location") != "/dashboard/sign-in?next=%2Fdashboard%2Fconversions%3Fstatus%3Dpending" {
			t.Errorf("a page without a session: %d %s", p.status, p.header.Get("Location"))
		}
		if p := s.post(c, "/dashboard/settings/keys", url.Values{"name": {"x"}}); p.status != 403 {
			t.Errorf("a form without a session: %d", p.status)
		}
		// After signing in, back where the person was going; and only within
		// the dashboard.
		for next, want := range map[string]string{
			"/dashboard/conversions?status=pending": "/dashboard/conversions?status=pending",
			"https://evil.example/":                 "/dashboard",
			"//evil.example/dashboard/":             "/dashboard",
			"/dashboard/../apply/x":                 "/dashboard",
			"/dashboard/sign-in":                    "/dashboard",
		} {
			if p := s.signIn(client(t), next); p.status != 303 || p.header.Get("Location") != want {
				t.Errorf("next=%q: %d Location %q, want %q", next, p.status, p.header.Get("Location"), want)
			}
		}
	})
}

func TestHeadersAndCookies(t *testing.T) {
	s := newSite(t, testenv.Bolt(t), httpapi.Config{})
	c := client(t)
	req, _ := http.NewRequest("GET", s.srv.URL+"/dashboard/sign-in", nil)
	req.Header.Set("X-Forwarded-Proto", "https") // as API Gateway sends it
	p := s.do(c, req)
	h := p.header
	if h.Get("Content-Security-Policy") != "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'" ||
		h.Get("X-Frame-Options") != "DENY" || h.Get("X-Content-Type-Options") != "nosniff" || h.Get("Cache-Control") != "no-store" {
		t.Errorf("page headers: %v", h)
	}
	if ck := h.Get("Set-Cookie"); !strings.Contains(ck, "HttpOnly") || !strings.Contains(ck, "SameSite=Lax") || !strings.Contains(ck, "Secure") {
		t.Errorf("form cookie over https: %q", ck)
	}
	if p := s.signIn(c, ""); !strings.Contains(p.header.Get("Set-Cookie"), "tally_session=") ||
		strings.Contains(p.header.Get("Set-Cookie"), "Secure") || !strings.Contains(p.header.Get("Set-Cookie"), "HttpOnly") {
		t.Errorf("session cookie over plain http: %q (no Secure, or the browser would not send it back)", p.header.Get("Set-Cookie"))
	}
	// The page refers to nothing outside this origin.
	home := s.get(c, "/dashboard")
	if home.status != 200 {
		t.Fatalf("overview: %d", home.status)
	}
	for _, ref := range regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(home.body, -1) {
		if !strings.HasPrefix(ref[1], "/") {
			t.Errorf("the overview refers to %q, outside this origin", ref[1])
		}
	}
	css := s.get(c, "/dashboard/assets/app.css")
	if css.status != 200 || css.header.Get("Content-Type") != "text/css; charset=utf-8" || strings.Contains(css.body, "url(http") || strings.Contains(css.body, "@import") {
		t.Errorf("stylesheet: %d %s", css.status, css.header.Get("Content-Type"))
	}
	for _, path := range []string{"/dashboard/assets/..%2f..%2fgo.mod", "/dashboard/assets/nope.css"} {
		// The dashboard's own page, not net/http's plain-text one.
		if p := s.get(c, path); p.status != 404 || !strings.HasPrefix(p.header.Get("Content-Type"), "text/html") || !strings.Contains(p.body, "Not found") {
			t.Errorf("%s: %d %s %.100q", path, p.status, p.header.Get("Content-Type"), p.body)
		}
	}
}

func TestFormsNeedTheirToken(t *testing.T) {
	s := newSite(t, testenv.Bolt(t), httpapi.Config{})
	c := client(t)
	s.signIn(c, "")
	tok := token(t, s.get(c, "/dashboard/settings/keys"))
	for name, tc := range map[string]struct {
		form   url.Values
		header []string
	}{
		"no token":          {url.Values{"name": {"x"}}, nil},
		"another token":     {url.Values{"name": {"x"}, "csrf": {strings.Repeat("a", 64)}}, nil},
		"from another site": {url.Values{"name": {"x"}, "csrf": {tok}}, []string{"Sec-Fetch-Site", "cross-site"}},
	} {
		if p := s.post(c, "/dashboard/settings/keys", tc.form, tc.header...); p.status != 403 {
			t.Errorf("%s: %d", name, p.status)
		}
	}
	keys, _, err := s.svc.Identity.ActiveAPIKeys(context.Background(), s.brandID, records.ListParams{})
	if err != nil || len(keys) != 0 {
		t.Errorf("refused forms made keys: %v %v", keys, err)
	}
	if p := s.post(c, "/dashboard/settings/keys", url.Values{"name": {"ok"}, "csrf": {tok}}); p.status != 200 || !strings.Contains(p.body, "tally_sk_") {
		t.Errorf("with its token: %d", p.status)
	}
	// Signing out ends the session on the server: its cookie is worthless.
	cookies := c.Jar.Cookies(mustURL(s.srv.URL + "/dashboard"))
	s.post(c, "/dashboard/sign-out", url.Values{"csrf": {tok}})
	stale := client(t)
	stale.Jar.SetCookies(mustURL(s.srv.URL+"/dashboard"), cookies)
	if p := s.get(stale, "/dashboard"); p.status != 303 {
		t.Errorf("a signed-out session still opens pages: %d", p.status)
	}
}

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestApplicationPage(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{ApplicationRateLimit: 2}, service.WithClock(testenv.MidMinute().Now))
		c := client(t)
		form := s.get(c, "/apply/"+s.brandID)
		apply := url.Values{"csrf": {token(t, form)}, "name": {"Pat"}, "email": {"pat@example.com"}}
		if p := s.post(c, "/apply/"+s.brandID, apply); p.status != 200 || !strings.Contains(p.body, "Thank you, Pat") {
			t.Fatalf("apply: %d", p.status)
		}
		// The same address again: the problem beside the email field.
		p := s.post(c, "/apply/"+s.brandID, apply)
		if p.status != 422 || !regexp.MustCompile(`id="email-error">An application with this email already exists`).MatchString(p.body) {
			t.Errorf("a second application: %d", p.status)
		}
		if p := s.post(c, "/apply/"+s.brandID, url.Values{"csrf": apply["csrf"], "name": {"Sam"}, "email": {"sam@example.com"}}); p.status != 429 ||
			p.header.Get("Retry-After") == "" || !strings.Contains(p.body, "Too many applications") {
			t.Errorf("past the per-IP limit: %d", p.status)
		}
		if p := s.post(c, "/apply/"+s.brandID, url.Values{"name": {"Pat"}, "email": {"x@example.com"}}); p.status != 403 {
			t.Errorf("without the form's token: %d", p.status)
		}
		if p := s.get(c, "/apply/brd_01kb7k3m5n6p7q8r9s0t1v2w3x"); p.status != 404 {
			t.Errorf("an unknown brand's page: %d", p.status)
		}
	})
}

// Sign-in attempts count per address and per client IP, before the password
// is checked, in windows of 15 minutes.
func TestSignInThrottling(t *testing.T) {
	// Mid-window, so the attempts cannot straddle two windows.
	clock := testenv.NewClock(time.Now().Truncate(15 * time.Minute).Add(5 * time.Minute))
	s := newSite(t, testenv.Bolt(t), httpapi.Config{}, service.WithClock(clock.Now))
	c := client(t)
	tok := token(t, s.get(c, "/dashboard/sign-in"))
	attempt := func(email, password string) page {
		return s.post(c, "/dashboard/sign-in", url.Values{"csrf": {tok}, "email": {email}, "password": {password}})
	}
	for i := range 10 {
		if p := attempt("Owner@acme.example", "wrong"); p.status != 401 {
			t.Fatalf("attempt %d: %d", i+1, p.status)
		}
	}
	if p := attempt("owner@acme.example", pw); p.status != 429 || p.header.Get("Retry-After") == "" {
		t.Errorf("the right password after 10 wrong ones: %d %v", p.status, p.header)
	}
	// Other addresses from the same IP go on until the IP's 30.
	for i := range 20 {
		if p := attempt("nobody@acme.example"+strings.Repeat("x", i%3), "wrong"); p.status != 401 && p.status != 429 {
			t.Fatalf("attempt %d: %d", i+1, p.status)
		}
	}
	if p := attempt("someone.else@acme.example", pw); p.status != 429 {
		t.Errorf("past the IP's attempts: %d", p.status)
	}
}
