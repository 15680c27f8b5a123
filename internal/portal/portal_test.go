package portal_test

// The portal over real HTTP on loopback, without a browser: the rules a
// script could test (cookies, CSRF, throttling, whose data a page shows).
// browser_test.go uses the pages as a person does.

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/portal"
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

const pw = "correct horse battery staple"

func ptr[T any](v T) *T { return &v }

// Revenue the brands record, in every form a page could show it: no
// portal page may.
var revenues = []string{"987.65", "98765", "12,345.67", "1234567", "12345.67"}

// world is the portal of a local server: brand Acme with partners Ann and
// Bob, brand Bolt with partner Cat, each with clicks, conversions and (at
// Acme) a payout and postbacks that a receiver on loopback answered.
type world struct {
	t             *testing.T
	srv           *httptest.Server
	svc           *service.Service
	acme, bolt    string
	offer         tally.Offer
	ann, bob, cat tally.Partner
	deliveries    map[string]string // a postback delivery's id, by partner id
}

func newWorld(t *testing.T, st store.Store) *world {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	quiet := slog.New(slog.DiscardHandler)
	svc := servicetest.New(st, service.WithLoopbackReceivers(),
		service.WithPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), 2, quiet))
	go svc.Pipeline.Run(ctx)
	cfg := httpapi.Config{Logger: quiet}
	cfg.Portal = portal.New(svc.API(), cfg)
	cfg.Dashboard = dashboard.New(svc.API(), cfg) // where a brand invites its partners
	srv := httptest.NewServer(httpapi.New(svc.API(), cfg).Handler())
	t.Cleanup(srv.Close)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "counted") }))
	t.Cleanup(rcv.Close)

	w := &world{t: t, srv: srv, svc: svc, deliveries: map[string]string{}}
	w.acme, w.bolt = w.brand("Acme Shoes"), w.brand("Bolt Bikes")
	if _, err := svc.Accounts.CreateUser(ctx, accounts.UserInput{BrandID: &w.acme, Email: ptr("owner@acme.example"), Password: ptr(pw)}); err != nil {
		t.Fatal(err)
	}
	w.offer = w.newOffer(w.acme, "Running shoes")
	w.newOffer(w.acme, "Trail socks")
	boltOffer := w.newOffer(w.bolt, "City bikes")
	w.ann, w.bob, w.cat = w.partner(w.acme, "Ann Reviews", "ann@example.com"), w.partner(w.acme, "Bob Deals", "bob@example.com"), w.partner(w.bolt, "Cat Rides", "cat@example.com")
	for _, p := range []tally.Partner{w.ann, w.bob, w.cat} {
		pb := rcv.URL + "/pb?click={click_id}&amount={payout}&sub={sub1}"
		if _, err := svc.Endpoints.PutPostback(ctx, p.BrandID, p.ID, endpoints.PostbackInput{URL: &pb}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		if _, _, err := svc.Clicks.RecordClick(ctx, clicks.ClickInput{OfferID: w.offer.ID, PartnerID: w.ann.ID, IP: netip.MustParseAddr("203.0.113.7"), UserAgent: "Mozilla/5.0"}); err != nil {
			t.Fatal(err)
		}
	}
	w.convert(w.offer, w.ann, "spring", 0)
	w.convert(w.offer, w.ann, "summer", 1234567)
	w.convert(w.offer, w.bob, "bob-secret-sub", 0)
	w.convert(boltOffer, w.cat, "cat-secret-sub", 1234567)
	if _, err := svc.Payouts.CreatePayout(ctx, w.acme, payouts.CreateInput{Currency: ptr("USD")}); err != nil {
		t.Fatal(err)
	}
	w.convert(w.offer, w.ann, "autumn", 0) // owed, in no payout yet
	for _, p := range []tally.Partner{w.ann, w.bob, w.cat} {
		w.deliveries[p.ID] = w.waitForDelivery(p)
	}
	return w
}

func (w *world) brand(name string) string {
	b, err := w.svc.Identity.CreateBrand(context.Background(), name)
	if err != nil {
		w.t.Fatal(err)
	}
	return b.ID
}

func (w *world) newOffer(brandID, name string) tally.Offer {
	o, err := w.svc.Offers.CreateOffer(context.Background(), brandID, offers.OfferInput{Name: ptr(name),
		DestinationURL: ptr("https://shop.example/?c={click_id}"), RevenueCents: ptr(int64(98765)), PayoutCents: ptr(int64(500)),
		Currency: ptr("USD")})
	if err != nil {
		w.t.Fatal(err)
	}
	return o
}

func (w *world) partner(brandID, name, email string) tally.Partner {
	ctx := context.Background()
	p, err := w.svc.Partners.Apply(ctx, brandID, partners.ApplicationInput{Name: &name, Email: &email})
	if err != nil {
		w.t.Fatal(err)
	}
	if p, err = w.svc.Partners.ApprovePartner(ctx, brandID, p.ID); err != nil {
		w.t.Fatal(err)
	}
	return p
}

// convert records a conversion; revenue 0 takes the offer's.
func (w *world) convert(o tally.Offer, p tally.Partner, sub1 string, revenue int64) {
	in := conversions.ConversionInput{OfferID: &o.ID, PartnerID: &p.ID, Sub1: &sub1}
	if revenue > 0 {
		in.RevenueCents = &revenue
	}
	if _, _, err := w.svc.Conversions.RecordConversion(context.Background(), o.BrandID, in); err != nil {
		w.t.Fatal(err)
	}
}

// waitForDelivery waits for a succeeded postback delivery of p and
// returns its id.
func (w *world) waitForDelivery(p tally.Partner) string {
	deadline := time.Now().Add(30 * time.Second)
	for {
		list, _, err := w.svc.Deliveries.Deliveries(context.Background(), p.BrandID,
			endpoints.DeliveryFilter{PartnerID: p.ID, Status: tally.DeliverySucceeded}, records.ListParams{})
		if err != nil {
			w.t.Fatal(err)
		}
		if len(list) > 0 {
			return list[0].ID
		}
		if time.Now().After(deadline) {
			w.t.Fatalf("no postback delivered for %s", p.Name)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *world) invite(p tally.Partner) string {
	inv, err := w.svc.Portal.Invite(context.Background(), p.BrandID, p.ID)
	if err != nil {
		w.t.Fatal(err)
	}
	return inv.Token
}

// client is a browser without JavaScript: cookies, no redirects followed.
func client(t *testing.T) *http.Client {
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

func (w *world) do(c *http.Client, method, path string, form url.Values) page {
	w.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, _ := http.NewRequest(method, w.srv.URL+path, body)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	res, err := c.Do(req)
	if err != nil {
		w.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return page{res.StatusCode, res.Header, string(b)}
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

func csrf(t *testing.T, p page) string {
	t.Helper()
	m := csrfRE.FindStringSubmatch(p.body)
	if m == nil {
		t.Fatalf("no CSRF token on the page (status %d)", p.status)
	}
	return m[1]
}

// signIn signs c in through the sign-in form with password.
func (w *world) signIn(c *http.Client, email, password string) page {
	w.t.Helper()
	tok := csrf(w.t, w.do(c, "GET", "/portal/sign-in", nil))
	return w.do(c, "POST", "/portal/sign-in", url.Values{"csrf": {tok}, "email": {email}, "password": {password}})
}

// pages are the paths of the portal's signed-in pages for the world's Ann.
func (w *world) pages() []string {
	return []string{"/portal", "/portal/links", "/portal/links?offer=" + w.offer.ID + "&sub1=x", "/portal/conversions",
		"/portal/conversions?status=approved&partnerId=" + w.bob.ID, "/portal/payouts", "/portal/postback",
		"/portal/postback/deliveries/" + w.deliveries[w.ann.ID]}
}

// noRevenue fails the test when body shows revenue, or anything of
// another partner's.
func (w *world) noRevenue(what, body string) {
	w.t.Helper()
	for _, r := range revenues {
		if strings.Contains(body, r) {
			w.t.Errorf("%s shows revenue %s", what, r)
		}
	}
	for _, other := range []string{"revenue", "profit", w.bob.Name, w.bob.ID, w.cat.Name, w.cat.ID, "bob-secret-sub", "cat-secret-sub"} {
		if strings.Contains(strings.ToLower(body), strings.ToLower(other)) {
			w.t.Errorf("%s shows %q", what, other)
		}
	}
}

func TestPortalKeepsEachPartnerToItsOwn(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		w := newWorld(t, st)
		if _, _, err := w.svc.Portal.AcceptInvite(context.Background(), w.invite(w.ann), pw); err != nil {
			t.Fatal(err)
		}
		c := client(t)
		if p := w.do(c, "GET", "/portal/payouts", nil); p.status != 303 || p.header.Get("Location") != "/portal/sign-in?next=%2Fportal%2Fpayouts" {
			t.Errorf("a page without a session: %d to %q", p.status, p.header.Get("Location"))
		}
		if p := w.signIn(c, "ann@example.com", pw+"!"); p.status != 401 || !strings.Contains(p.body, "not right") {
			t.Errorf("a wrong password: %d", p.status)
		}
		// The session's cookie is the portal's own: on /portal, HttpOnly,
		// SameSite.
		p := w.signIn(c, "Ann@Example.com", pw)
		cookie := p.header.Get("Set-Cookie")
		if p.status != 303 || p.header.Get("Location") != "/portal" || !strings.HasPrefix(cookie, "tally_portal=") ||
			!strings.Contains(cookie, "Path=/portal;") || !strings.Contains(cookie, "HttpOnly") || !strings.Contains(cookie, "SameSite=Lax") {
			t.Fatalf("signing in: %d to %q, cookie %q", p.status, p.header.Get("Location"), cookie)
		}

		// Every page shows Ann's, never revenue nor another partner's.
		for _, path := range w.pages() {
			p := w.do(c, "GET", path, nil)
			if p.status != 200 {
				t.Fatalf("GET %s: %d\n%s", path, p.status, p.body)
			}
			if csp := p.header.Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") {
				t.Errorf("GET %s: CSP %q", path, csp)
			}
			w.noRevenue(path, p.body)
		}
		// The sub-ID builder makes no link that the click route would
		// refuse: a sub over 255 characters is named instead.
		offerID := regexp.MustCompile(`/c/(off_[0-9a-z]+)`).FindStringSubmatch(w.do(c, "GET", "/portal/links", nil).body)
		if offerID == nil {
			t.Fatal("no tracking link on the Links page")
		}
		built := w.do(c, "GET", "/portal/links?offer="+offerID[1]+"&sub1=spring", nil).body
		long := w.do(c, "GET", "/portal/links?offer="+offerID[1]+"&sub1="+strings.Repeat("x", 256), nil).body
		if !strings.Contains(built, "data-built-link") || strings.Contains(built, "data-builder-error") ||
			strings.Contains(long, "data-built-link") || !strings.Contains(long, "data-builder-error") {
			t.Errorf("the builder: a good sub built a link %v, a 256-character one was refused %v",
				strings.Contains(built, "data-built-link"), strings.Contains(long, "data-builder-error"))
		}
		conv := w.do(c, "GET", "/portal/conversions", nil).body
		for _, want := range []string{"spring", "summer", "autumn", "5.00"} {
			if !strings.Contains(conv, want) {
				t.Errorf("Ann's conversions lack %q", want)
			}
		}
		// Another partner's delivery, at this brand or another, is not
		// found, whatever the id.
		for _, other := range []string{w.deliveries[w.bob.ID], w.deliveries[w.cat.ID]} {
			if p := w.do(c, "GET", "/portal/postback/deliveries/"+other, nil); p.status != 404 {
				t.Errorf("another partner's delivery %s: %d", other, p.status)
			}
		}

		// A form without the session's CSRF token changes nothing.
		tok := csrf(t, w.do(c, "GET", "/portal/postback", nil))
		if p := w.do(c, "POST", "/portal/postback/delete", url.Values{"confirm": {"yes"}}); p.status != 403 {
			t.Errorf("a form without its token: %d", p.status)
		}
		if _, err := w.svc.Endpoints.Postback(context.Background(), w.acme, w.ann.ID); err != nil {
			t.Errorf("the postback after a refused form: %v", err)
		}
		if p := w.do(c, "POST", "/portal/postback", url.Values{"csrf": {tok}, "url": {"https://ann.example/pb?c={click_id}"}, "events": {"conversion.approved"}}); p.status != 303 {
			t.Errorf("saving the postback: %d\n%s", p.status, p.body)
		}
		if pb, _ := w.svc.Endpoints.Postback(context.Background(), w.acme, w.ann.ID); pb.URL != "https://ann.example/pb?c={click_id}" {
			t.Errorf("Ann's postback after saving: %+v", pb)
		}
		if pb, _ := w.svc.Endpoints.Postback(context.Background(), w.acme, w.bob.ID); strings.Contains(pb.URL, "ann.example") {
			t.Errorf("Ann's form changed Bob's postback: %+v", pb)
		}
		// The brand's audit log says Ann changed it.
		entries, _, err := w.svc.Audit.Entries(context.Background(), w.acme, records.ListParams{Limit: 1})
		if err != nil || len(entries) != 1 || entries[0].Action != audit.PostbackUpdated || entries[0].Actor != audit.Partner(w.ann.ID, w.ann.Email) {
			t.Errorf("the audit log after Ann's change: %+v, %v", entries, err)
		}

		// Banning Ann ends her session at its next request.
		if _, err := w.svc.Partners.BanPartner(context.Background(), w.acme, w.ann.ID); err != nil {
			t.Fatal(err)
		}
		if p := w.do(c, "GET", "/portal", nil); p.status != 303 || !strings.HasPrefix(p.header.Get("Location"), "/portal/sign-in") {
			t.Errorf("a banned partner's page: %d to %q", p.status, p.header.Get("Location"))
		}
		if p := w.signIn(c, "ann@example.com", pw); p.status != 401 || !strings.Contains(p.body, "not active") {
			t.Errorf("a banned partner signing in: %d", p.status)
		}
	})
}

func TestPortalSignInIsThrottled(t *testing.T) {
	w := newWorld(t, testenv.Bolt(t))
	c := client(t)
	for i := range 10 {
		if p := w.signIn(c, "bob@example.com", "not the password"); p.status != 401 {
			t.Fatalf("attempt %d: %d", i+1, p.status)
		}
	}
	p := w.signIn(c, "bob@example.com", "not the password")
	if p.status != 429 || p.header.Get("Retry-After") == "" || !strings.Contains(p.body, "Too many sign-in attempts") {
		t.Errorf("the 11th attempt for one address: %d, Retry-After %q", p.status, p.header.Get("Retry-After"))
	}
}
