package httpapi_test

import (
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// visit follows a tracking link as a browser would, without following the
// redirect, with the given request headers.
func (e *env) visit(path string, header map[string]string) response {
	e.t.Helper()
	r, err := e.tryVisit(path, header)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) tryVisit(path string, header map[string]string) (response, error) {
	req := e.srvRequest("GET", path)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return e.sendNoRedirect(req)
}

// srvRequest is a request to the test server, without a body.
func (e *env) srvRequest(method, path string) *http.Request {
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	return req
}

// sendNoRedirect sends req and answers with what came, redirects included.
func (e *env) sendNoRedirect(req *http.Request) (response, error) {
	client := *e.srv.Client()
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}, err
}

func (e *env) doNoRedirect(req *http.Request) response {
	e.t.Helper()
	r, err := e.sendNoRedirect(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

const browserUA = "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

func TestClickRecordsAndRedirects(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offerID := e.offer(key, map[string]any{
			"destinationUrl": "https://shop.example/land?c={click_id}&o={offer_id}&p={partner_id}&s1={sub1}&s2={sub2}&s5={sub5}&keep={}",
		})
		partnerID := e.activePartner(brandID, key)

		r := e.visit("/c/"+offerID+"?pid="+partnerID+"&sub1="+url.QueryEscape("spring sale&more")+"&sub5=%C3%A9t%C3%A9&utm_source=news",
			map[string]string{"User-Agent": browserUA, "Referer": "https://blog.example/post"})
		if r.status != http.StatusFound || r.header.Get("Cache-Control") != "no-store" {
			t.Fatalf("click: %d %v %s", r.status, r.header, r.body)
		}
		loc, err := url.Parse(r.header.Get("Location"))
		if err != nil || loc.Host != "shop.example" || loc.Path != "/land" {
			t.Fatalf("Location %q", r.header.Get("Location"))
		}
		lq := loc.Query()
		clickID := lq.Get("c")
		if !strings.HasPrefix(clickID, "clk_") || lq.Get("o") != offerID || lq.Get("p") != partnerID ||
			lq.Get("s1") != "spring sale&more" || lq.Get("s2") != "" || lq.Get("s5") != "été" || lq.Get("keep") != "{}" {
			t.Errorf("Location %s: macros not filled as expected: %v", loc, lq)
		}

		var c tally.Click
		e.must(200, e.call("GET", "/api/v1/clicks/"+clickID, key, nil)).decode(t, &c)
		if c.OfferID != offerID || c.PartnerID != partnerID || c.BrandID != brandID || c.Sub1 != "spring sale&more" || c.Sub5 != "été" ||
			c.UserAgent != browserUA || c.Referer != "https://blog.example/post" || c.IP != "127.0.0.1" || c.FraudSignals == nil {
			t.Errorf("stored click %+v", c)
		}
		// The client's headers are its word: characters that would show
		// stored text as something else (bidi overrides, line separators)
		// are kept as U+FFFD, not refused (the click still counts).
		r = e.visit("/c/"+offerID+"?pid="+partnerID, map[string]string{"User-Agent": "Mozilla/5.0 \u202Egpj.exe", "Referer": "https://blog.example/\u2066x\u2028"})
		e.must(302, r)
		hidden, _ := url.Parse(r.header.Get("Location"))
		var h tally.Click
		e.must(200, e.call("GET", "/api/v1/clicks/"+hidden.Query().Get("c"), key, nil)).decode(t, &h)
		if h.UserAgent != "Mozilla/5.0 \uFFFDgpj.exe" || h.Referer != "https://blog.example/\uFFFDx\uFFFD" {
			t.Errorf("stored User-Agent %q, Referer %q: want the hiding characters replaced with U+FFFD", h.UserAgent, h.Referer)
		}

		// More clicks, on a second offer too; lists filter and the report
		// counts exactly what is stored.
		other := e.offer(key, map[string]any{"currency": "EUR"})
		for range 3 {
			e.must(302, e.visit("/c/"+other+"?pid="+partnerID, map[string]string{"User-Agent": browserUA}))
		}
		all := e.listAll("/api/v1/clicks", key)
		byOffer := e.listAll("/api/v1/clicks?offerId="+other, key)
		byPartner := e.listAll("/api/v1/clicks?partnerId="+partnerID, key)
		if len(all) != 5 || len(byOffer) != 3 || len(byPartner) != 5 || all[4] != clickID {
			t.Errorf("lists: all %v, by offer %v, by partner %v", all, byOffer, byPartner)
		}
		var report struct{ Data []tally.ReportRow }
		e.must(200, e.call("GET", "/api/v1/reports?groupBy=offer", key, nil)).decode(t, &report)
		got := map[string]tally.ReportRow{}
		for _, row := range report.Data {
			got[row.OfferID] = row
		}
		if len(report.Data) != 2 || got[offerID].Clicks != 2 || got[offerID].Currency != "USD" || got[other].Clicks != 3 ||
			got[other].Currency != "EUR" || got[other].Conversions != 0 {
			t.Errorf("report rows %+v, want 2 USD clicks and 3 EUR clicks", report.Data)
		}
	})
}

func TestClicksThatAreRefusedStoreNothing(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offerID := e.offer(key, nil)
		paused := e.offer(key, map[string]any{"status": "paused"})
		active := e.activePartner(brandID, key)
		applied := e.must(201, e.call("POST", "/api/public/brands/"+brandID+"/applications", "", map[string]any{"name": "New", "email": "new@example.com"})).field(t, "id")
		banned := e.activePartner(brandID, key)
		e.must(200, e.call("POST", "/api/v1/partners/"+banned+"/ban", key, nil))
		otherBrand, otherKey := e.brand()
		otherPartner := e.activePartner(otherBrand, otherKey)

		for _, c := range []struct {
			path   string
			status int
			code   string
		}{
			{"/c/off_01jd8x5y3z0000000000000000?pid=" + active, 404, "not_found"},
			{"/c/not-an-offer?pid=" + active, 404, "not_found"},
			{"/c/" + paused + "?pid=" + active, 404, "not_found"},
			{"/c/" + offerID, 404, "not_found"},
			{"/c/" + offerID + "?pid=", 404, "not_found"},
			{"/c/" + offerID + "?pid=prt_nope", 404, "not_found"},
			{"/c/" + offerID + "?pid=" + applied, 404, "not_found"},
			{"/c/" + offerID + "?pid=" + banned, 404, "not_found"},
			{"/c/" + offerID + "?pid=" + otherPartner, 404, "not_found"},
			{"/c/" + offerID + "?pid=" + active + "&pid=" + active, 422, "validation_error"},
			{"/c/" + offerID + "?pid=" + active + "&sub2=" + strings.Repeat("x", 256), 422, "validation_error"},
			{"/c/" + offerID + "?pid=" + active + "&sub3=a%0Ab", 422, "validation_error"},
			{"/c/" + offerID + "?pid=" + active + "&sub4=%FF%FE", 422, "validation_error"},
			{"/c/" + offerID + "?pid=" + active + "&sub1=a&sub1=b", 422, "validation_error"},
			// A value that is not percent-encoded right was dropped (the
			// click stored without it), and a ';' between parameters lost
			// the partner: both say what is wrong instead.
			{"/c/" + offerID + "?pid=" + active + "&sub1=50%off", 422, "validation_error"},
			{"/c/" + offerID + "?p%69d=" + active + "&sub1=%zz", 422, "validation_error"},
			{"/c/" + offerID + "?pid=" + active + ";sub1=x", 422, "validation_error"},
			{"/c/" + offerID + "?pid=" + active + "&pid", 422, "validation_error"},
		} {
			r := e.visit(c.path, map[string]string{"User-Agent": browserUA})
			if r.status != c.status || r.errorCode() != c.code || r.header.Get("Location") != "" {
				t.Errorf("GET %s: %d %s, want %d %s", c.path, r.status, r.body, c.status, c.code)
			}
		}
		req, err := http.NewRequest("HEAD", e.srv.URL+"/c/"+offerID+"?pid="+active, nil)
		if err != nil {
			t.Fatal(err)
		}
		if r, err := e.send(req); err != nil || r.status != 405 || r.header.Get("Allow") != "GET" {
			t.Errorf("HEAD on a tracking link: %v %+v, want 405 with Allow: GET", err, r)
		}
		if got := e.listAll("/api/v1/clicks", key); len(got) != 0 {
			t.Errorf("refused clicks were stored: %v", got)
		}
		var report struct{ Data []tally.ReportRow }
		e.must(200, e.call("GET", "/api/v1/reports", key, nil)).decode(t, &report)
		if len(report.Data) != 0 {
			t.Errorf("refused clicks counted in the report: %+v", report.Data)
		}
		// The same link works once the partner is active and the offer too,
		// whatever else an ad platform appends, malformed or not.
		e.must(302, e.visit("/c/"+offerID+"?pid="+active, nil))
		e.must(302, e.visit("/c/"+offerID+"?gclid=%zz&utm=a;b&p%69d="+active+"&sub1=a%2Bb+c&&=x", nil))
		var c tally.Click
		e.must(200, e.call("GET", "/api/v1/clicks/"+e.listAll("/api/v1/clicks", key)[0], key, nil)).decode(t, &c)
		if c.PartnerID != active || c.Sub1 != "a+b c" {
			t.Errorf("click with other parameters around: partner %q, sub1 %q", c.PartnerID, c.Sub1)
		}
	})
}

// A {name} in an offer's destination URL that is not a macro ({clickid},
// {CLICK_ID}, another network's {aff_sub}) would reach the landing page as
// written and leave the conversion without its click: creating or changing
// the offer with one answers 422 listing the macros, and changes nothing.
// Braces around something that is not a name stay as written.
func TestOfferDestinationWithAnUnknownMacroIsRefused(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000})
	brandID, key := e.brand()
	offer := map[string]any{"name": "Shoes", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"}
	for _, dest := range []string{
		"https://shop.example/p?c={clickid}",
		"https://shop.example/p?c={CLICK_ID}",
		"https://shop.example/p?c={click_id}&s={aff_sub}",
		"https://shop.example/{sub6}/p",
		"https://shop.example/p?c={a{clickid}",
	} {
		offer["destinationUrl"] = dest
		r := e.call("POST", "/api/v1/offers", key, offer)
		if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "destinationUrl") ||
			!strings.Contains(string(r.body), "{click_id}, {offer_id}, {partner_id}, {sub1}") {
			t.Errorf("destinationUrl %s: %d %s, want 422 naming destinationUrl and listing the macros", dest, r.status, r.body)
		}
	}
	if got := e.listAll("/api/v1/offers", key); len(got) != 0 {
		t.Fatalf("%d offers after refused ones, want none", len(got))
	}

	good := "https://shop.example/p?c={click_id}&o={offer_id}&q={}&s={sub1}"
	offerID := e.offer(key, map[string]any{"destinationUrl": good})
	r := e.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"destinationUrl": "https://shop.example/p?c={clickId}"})
	if r.status != 422 || !strings.Contains(string(r.body), "{clickId}") {
		t.Errorf("PATCH to an unknown macro: %d %s, want 422 naming {clickId}", r.status, r.body)
	}
	if got := e.must(200, e.call("GET", "/api/v1/offers/"+offerID, key, nil)).field(t, "destinationUrl"); got != good {
		t.Errorf("destinationUrl %s after a refused change, want %s", got, good)
	}
	loc := e.must(302, e.visit("/c/"+offerID+"?pid="+e.activePartner(brandID, key)+"&sub1=mail", map[string]string{"User-Agent": browserUA})).header.Get("Location")
	if !strings.HasPrefix(loc, "https://shop.example/p?c=clk_") || !strings.HasSuffix(loc, "&o="+offerID+"&q={}&s=mail") {
		t.Errorf("redirected to %s, want the macros filled and {} kept", loc)
	}
}

// An offer's fallbackUrl takes the visitors its link does not serve now:
// paused or capped offer, partner not active. They are redirected there,
// macros but {click_id} filled, and no click is stored. Without one, a
// browser reads a page, a program the error shape; a capped offer without
// one keeps its link working.
func TestLinksNotServedGoToTheFallback(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandID, key := e.brand()
		offer := map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/?c={click_id}", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"}
		for _, bad := range []string{"ftp://shop.example/", "shop.example/sold-out", "https://shop.example/?c={clickid}"} {
			offer["fallbackUrl"] = bad
			if r := e.call("POST", "/api/v1/offers", key, offer); r.status != 422 || !strings.Contains(string(r.body), "fallbackUrl") {
				t.Errorf("fallbackUrl %s: %d %s, want 422 naming fallbackUrl", bad, r.status, r.body)
			}
		}
		if got := e.listAll("/api/v1/offers", key); len(got) != 0 {
			t.Fatalf("%d offers after refused ones, want none", len(got))
		}
		const fallback = "https://shop.example/sold-out?o={offer_id}&s={sub1}&c={click_id}"
		offerID := e.offer(key, map[string]any{"fallbackUrl": fallback, "caps": map[string]any{"daily": 1}})
		if got := e.must(200, e.call("GET", "/api/v1/offers/"+offerID, key, nil)).field(t, "fallbackUrl"); got != fallback {
			t.Errorf("fallbackUrl %q, want %q", got, fallback)
		}
		active := e.activePartner(brandID, key)
		banned := e.activePartner(brandID, key)
		e.must(200, e.call("POST", "/api/v1/partners/"+banned+"/ban", key, nil))
		ua := map[string]string{"User-Agent": browserUA}
		wantFallback := "https://shop.example/sold-out?o=" + offerID + "&s=mail&c="

		e.must(302, e.visit("/c/"+offerID+"?pid="+active+"&sub1=mail", ua))
		if loc := e.must(302, e.visit("/c/"+offerID+"?pid="+banned+"&sub1=mail", ua)).header.Get("Location"); loc != wantFallback {
			t.Errorf("banned partner's link: Location %s, want %s", loc, wantFallback)
		}
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": active}))
		if loc := e.must(302, e.visit("/c/"+offerID+"?pid="+active+"&sub1=mail", ua)).header.Get("Location"); loc != wantFallback {
			t.Errorf("capped offer's link: Location %s, want %s", loc, wantFallback)
		}
		e.must(200, e.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"status": "paused", "caps": map[string]any{"daily": nil}}))
		if loc := e.must(302, e.visit("/c/"+offerID+"?pid="+active+"&sub1=mail", ua)).header.Get("Location"); loc != wantFallback {
			t.Errorf("paused offer's link: Location %s, want %s", loc, wantFallback)
		}
		if got := e.listAll("/api/v1/clicks", key); len(got) != 1 {
			t.Errorf("%d clicks stored, want only the first one", len(got))
		}

		// Removed, the fallback leaves the visitor a page, the program JSON.
		r := e.must(200, e.call("PATCH", "/api/v1/offers/"+offerID, key, map[string]any{"fallbackUrl": ""}))
		if strings.Contains(string(r.body), "fallbackUrl") {
			t.Errorf("offer after removing its fallback: %s", r.body)
		}
		if r := e.visit("/c/"+offerID+"?pid="+active, ua); r.status != 404 || r.errorCode() != "not_found" {
			t.Errorf("paused offer without a fallback, for a program: %d %s, want 404 not_found", r.status, r.body)
		}
		browser := map[string]string{"User-Agent": browserUA, "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
		for path, status := range map[string]int{
			"/c/" + offerID + "?pid=" + active:                  404,
			"/c/off_01jd8x5y3z0000000000000000?pid=" + active:   404,
			"/c/" + offerID + "?pid=" + active + "&sub1=50%off": 422,
		} {
			r := e.visit(path, browser)
			body := string(r.body)
			if r.status != status || !strings.HasPrefix(r.header.Get("Content-Type"), "text/html") ||
				!strings.Contains(body, "<h1>") || strings.ContainsAny(body, "{}") || strings.Contains(body, "not_found") || strings.Contains(body, "pid") {
				t.Errorf("GET %s in a browser: %d %s %s, want %d and a page for visitors", path, r.status, r.header.Get("Content-Type"), body, status)
			}
		}

		// A capped offer without a fallback keeps sending visitors on.
		plain := e.offer(key, map[string]any{"caps": map[string]any{"daily": 1}})
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": plain, "partnerId": active}))
		if loc := e.must(302, e.visit("/c/"+plain+"?pid="+active, ua)).header.Get("Location"); !strings.HasPrefix(loc, "https://") || strings.Contains(loc, "sold-out") {
			t.Errorf("capped offer without a fallback: Location %s, want its destination", loc)
		}
		if got := e.listAll("/api/v1/clicks", key); len(got) != 2 {
			t.Errorf("%d clicks stored, want 2", len(got))
		}
	})
}
