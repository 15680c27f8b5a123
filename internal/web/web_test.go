package web_test

import (
	"context"
	"io"
	iofs "io/fs"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/web"
)

// A second site at /portal gets its own sign-in guard, cookie path,
// navigation, assets and confirmation step from the framework.
func TestSiteAtItsOwnPath(t *testing.T) {
	files := fstest.MapFS{"templates/home.html": {Data: []byte(`{{define "content"}}<h1>{{.Data}}</h1>{{end}}`)}}
	site := web.New(web.Config{Base: "/portal", Name: "Portal", Cookie: "tally_portal", Templates: []iofs.FS{files},
		Flashes: map[string]string{"saved": "Saved."}})
	sessions := func(_ context.Context, token string) (string, web.View, error) {
		if token != "good" {
			return "", web.View{}, tally.Errorf(tally.ECodeUnauthorized, "Sign in.")
		}
		return "pt_1", web.View{Account: "Pat", Nav: []web.NavItem{{Key: "home", Label: "Home", Href: "/portal"}}}, nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /portal/assets/{file}", site.Asset)
	mux.Handle("GET /portal", site.SignedIn(sessions, func(w http.ResponseWriter, r *web.Request) error {
		site.Render(w, "home", r.View("Home", "home", "Hello "+r.Subject))
		return nil
	}))
	mux.Handle("POST /portal/ban", site.SignedIn(sessions, func(w http.ResponseWriter, r *web.Request) error {
		if !web.Confirmed(w, r, web.Confirmation{Heading: "Ban?", Button: "Ban", Cancel: "/portal"}) {
			return nil
		}
		return web.Redirect(w, r, "/portal", "saved")
	}))
	mux.HandleFunc("GET /portal/sign-in", func(w http.ResponseWriter, r *http.Request) {
		site.SetSession(w, r, "good", 60)
	})
	srv := httptest.NewServer(site.Protect(mux))
	defer srv.Close()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

	res, err := c.Get(srv.URL + "/portal")
	if err != nil {
		t.Fatal(err)
	}
	if loc := res.Header.Get("Location"); res.StatusCode != http.StatusSeeOther || loc != "/portal/sign-in?next=%2Fportal" {
		t.Fatalf("without a session: %d to %q, want 303 to the portal's sign-in", res.StatusCode, loc)
	}
	res, err = c.Get(srv.URL + "/portal/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	if ck := res.Header.Get("Set-Cookie"); !strings.Contains(ck, "tally_portal=good") || !strings.Contains(ck, "Path=/portal") {
		t.Fatalf("session cookie %q, want tally_portal on Path=/portal", ck)
	}
	page := get(t, c, srv.URL+"/portal?done=saved")
	for _, want := range []string{"<h1>Hello pt_1</h1>", `href="/portal/assets/app.css"`, `aria-label="Portal"`, `action="/portal/sign-out"`, "Saved.", `aria-current="page">Home`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q:\n%s", want, page)
		}
	}
	if css := get(t, c, srv.URL+"/portal/assets/app.css"); !strings.Contains(css, "{") {
		t.Error("no stylesheet under /portal/assets/")
	}

	// A form without the CSRF token changes nothing; with it, the
	// confirmation page comes first, then the action.
	res, err = c.PostForm(srv.URL+"/portal/ban", url.Values{"confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("without CSRF: %d, want 403", res.StatusCode)
	}
	csrf := web.CSRFToken("good")
	res, err = c.PostForm(srv.URL+"/portal/ban", url.Values{"csrf": {csrf}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK || !strings.Contains(string(body), `name="confirm" value="yes"`) {
		t.Fatalf("first post: %d, want the confirmation page:\n%s", res.StatusCode, body)
	}
	res, err = c.PostForm(srv.URL+"/portal/ban", url.Values{"csrf": {csrf}, "confirm": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if loc := res.Header.Get("Location"); loc != "/portal?done=saved" {
		t.Fatalf("confirmed: redirect to %q, want /portal?done=saved", loc)
	}
}

func get(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d\n%s", u, res.StatusCode, b)
	}
	return string(b)
}
