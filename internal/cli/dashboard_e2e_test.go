package cli_test

// The dashboard as a person uses it: a real headless Chromium (Debian's
// chromium package, which scripts/test.sh installs) driven with chromedp
// against the real local server (the tally binary), on the embedded store
// and on DynamoDB Local. The browser signs in, creates an offer, applies as
// a partner on the public page in a browser of its own, approves
// the partner, sees a conversion recorded over the API, follows a failing
// webhook to a loopback receiver through the delivery log and retries it,
// makes and revokes an API key, and downloads the report's CSV. It follows
// a bot's click through a partner's tracking link to the Clicks page,
// raises the fraud threshold and blocks an address on Settings → Fraud,
// sees a webhook disabled by its failures and brings it back with Enable and
// Recover, rotates its secret, sets a partner's postback and finds its test
// in the delivery log, edits an offer, and records a conversion through a
// GET postback with a token made on Settings → Postback token. Security
// checks run alongside: markup from outside renders as text, a form without
// its CSRF token is refused, another brand's ids answer 404, and wrong
// passwords are throttled.
//
// Every page is saved as a PNG at 1280×800 and at 390 px wide into
// screenshots/ at the repository root (gitignored), to look at.

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/tally-hq/tally/internal/reporoot"
)

// chromiumPath finds the browser, skipping the test where there is none
// (failing it in CI, which must not skip silently).
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: scripts/test.sh installs Debian's chromium package")
	}
	t.Skip("no chromium on PATH: run scripts/test.sh (it installs Debian's chromium package)")
	return ""
}

// newBrowser starts headless Chromium with the flags the closed network here
// needs, and returns a context for its first tab.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.NoSandbox, // root in CI
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800),
	)
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// tab is one browser tab on the server, with the steps the test takes.
type tab struct {
	t     *testing.T
	ctx   context.Context
	base  string // http://host:port
	shots string // folder for screenshots; "" takes none
}

// do runs actions with a time limit, failing the test on an error.
func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v\npage:\n%s", what, err, b.pageText())
	}
}

func run[T any](b *tab, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.t.Fatalf("%s: %v\npage:\n%s", what, err, b.pageText())
	}
	return v
}

// pageText is the visible text of the page, for failure messages.
func (b *tab) pageText() string {
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	s, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body ? document.location.pathname + '\\n' + document.body.innerText : ''"))
	if len(s) > 3000 {
		s = s[:3000]
	}
	return s
}

// open loads a page and returns its HTTP status.
func (b *tab) open(path string) int64 {
	b.t.Helper()
	resp := run(b, "open "+path, chromedp.NavigateResponse(b.base+path))
	if resp == nil {
		return 0
	}
	return resp.Status
}

// openOK loads a page that must answer 200 and show sel.
func (b *tab) openOK(path, sel string) {
	b.t.Helper()
	if status := b.open(path); status != 200 {
		b.t.Fatalf("%s: status %d\n%s", path, status, b.pageText())
	}
	b.do("wait for "+sel+" on "+path, chromedp.WaitReady(chromedp.CSS(sel)))
}

// fill sets form fields by name within the form sel, as typing would.
func (b *tab) fill(form string, values map[string]string) {
	b.t.Helper()
	raw, err := json.Marshal(values)
	if err != nil {
		b.t.Fatal(err)
	}
	js := fmt.Sprintf(`(() => { const f = document.querySelector(%q); if (!f) return "no form";
		for (const [k, v] of Object.entries(%s)) { const el = f.querySelector("[name='" + k + "']"); if (!el) return "no field " + k; el.value = v; }
		return "ok"; })()`, form, raw)
	if got := run(b, "fill "+form, chromedp.Evaluate[string](js)); got != "ok" {
		b.t.Fatalf("fill %s: %s", form, got)
	}
}

// submit clicks a form's button and waits until the page at a path
// matching pathRE has loaded (a redirect or a re-rendered form).
func (b *tab) submit(button, pathRE string) {
	b.t.Helper()
	before := run(b, "mark the page", chromedp.Evaluate[float64]("window.__page = Math.random()"))
	b.do("click "+button, chromedp.Click(chromedp.CSS(button)))
	re := regexp.MustCompile(pathRE)
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		state, err := chromedp.Run(ctx, chromedp.Evaluate[[]any]("[window.__page === undefined ? -1 : window.__page, document.readyState, location.pathname]"))
		cancel()
		if err == nil && len(state) == 3 && state[0] != before && state[1] == "complete" && re.MatchString(state[2].(string)) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("after %s: no page at %s (state %v, %v)\n%s", button, pathRE, state, err, b.pageText())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (b *tab) text(sel string) string {
	b.t.Helper()
	return run(b, "text of "+sel, chromedp.Text(chromedp.CSS(sel)))
}

func (b *tab) eval(js string) any {
	b.t.Helper()
	return run(b, js, chromedp.Evaluate[any](js))
}

// shot saves a screenshot of the whole page as <name>.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	png := run(b, "screenshot "+name, chromedp.FullScreenshot(100))
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// failingReceiver is a webhook receiver on loopback that answers 500 with
// markup in its body until it is made healthy.
type failingReceiver struct {
	srv     *httptest.Server
	healthy atomic.Bool
	got     atomic.Int64
}

const receiverBody = `<script>window.__pwned = "receiver"</script><b>receiver down</b>`

func newFailingReceiver(t *testing.T) *failingReceiver {
	rcv := &failingReceiver{}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.got.Add(1)
		if rcv.healthy.Load() {
			fmt.Fprint(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, receiverBody)
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

// botUA is a crawler's User-Agent with markup in it, which the pages must
// show as text.
const (
	botUA     = `<script>window.__pwned = "ua"</script>Googlebot/2.1 (+http://www.google.com/bot.html)`
	browserUA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
)

// follow opens a tracking link as a visitor with the User-Agent would, and
// returns the click id the redirect carries (the offer's destination has
// c={click_id}).
func follow(t *testing.T, link, userAgent string) string {
	t.Helper()
	req, err := http.NewRequest("GET", link, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("User-Agent", userAgent)
	resp, err := anonymousClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	id := loc.Query().Get("c")
	if resp.StatusCode != 302 || !strings.HasPrefix(id, "clk_") {
		t.Fatalf("%s: %d to %q; want a redirect carrying the click id", link, resp.StatusCode, resp.Header.Get("Location"))
	}
	return id
}

// recordingReceiver is a partner's postback server on loopback: it answers
// 200 and keeps the requests it got.
type recordingReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []string
}

func newRecordingReceiver(t *testing.T) *recordingReceiver {
	rcv := &recordingReceiver{}
	rcv.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rcv.mu.Lock()
		rcv.got = append(rcv.got, r.Method+" "+r.URL.RequestURI())
		rcv.mu.Unlock()
		fmt.Fprint(w, "OK")
	}))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

func (r *recordingReceiver) paths() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

func TestDashboardInABrowser(t *testing.T) {
	chromiumPath(t)
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []string{"bolt", "dynamodb"} {
		t.Run(backend, func(t *testing.T) {
			// An endpoint is disabled after one delivery failed every
			// attempt: its whole schedule.
			environ := env("TALLY_WEBHOOK_RETRY_SCALE=0.001", "TALLY_ENDPOINT_DISABLE_FAILURES=1")
			if backend == "dynamodb" {
				environ = dynamoEnviron(t, environ)
			}
			shots := ""
			if backend == "bolt" {
				shots = filepath.Join(root, "screenshots")
				if err := os.MkdirAll(shots, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			dashboardScenario(t, environ, shots)
		})
	}
}

func dashboardScenario(t *testing.T, environ []string, shots string) {
	data := t.TempDir()
	brandID, _, key := setupBrand(t, environ, data, "Acme Shoes")
	const email, password = "owner@acme.example", "correct horse battery staple"
	for _, u := range []string{email, "ops@acme.example"} {
		r := tallyStdin(t, environ, password+"\n", "users", "create", "--brand", brandID, "--email", u, "--data", data)
		if r.code != 0 {
			t.Fatalf("users create:\n%s", r)
		}
	}
	otherBrand, _, otherKey := setupBrand(t, environ, data, "Other Brand")
	s := serve(t, environ, "--data", data)
	base := "http://" + s.addr
	b := &tab{t: t, ctx: newBrowser(t), base: base, shots: shots}

	// --- Sign in: the wrong password is refused, the right one opens the overview.
	b.openOK("/dashboard", `form[action="/dashboard/sign-in"]`) // redirected to sign in
	b.shot("sign-in")
	b.fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": email, "password": "not the password"})
	b.submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard/sign-in$`)
	if msg := b.text(".error-box"); !strings.Contains(msg, "not right") {
		t.Errorf("a wrong password shows %q", msg)
	}
	b.fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": email, "password": password})
	b.submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard$`)
	if got := b.text(".brand"); got != "Acme Shoes" {
		t.Errorf("the header names the brand %q", got)
	}

	// --- Create an offer; a bad form shows each problem beside its field.
	b.openOK("/dashboard/offers", `a[href="/dashboard/offers/new"]`)
	b.openOK("/dashboard/offers/new", `form[action="/dashboard/offers"]`)
	b.fill(`form[action="/dashboard/offers"]`, map[string]string{"name": "", "destinationUrl": "shop.example", "revenue": "ten", "payout": "3.00"})
	b.submit(`form[action="/dashboard/offers"] button`, `^/dashboard/offers$`)
	errs := b.eval(`Array.from(document.querySelectorAll(".field-error")).map(e => e.closest("label").querySelector("input,select").name + ": " + e.textContent)`)
	for _, want := range []string{"name: Name is required", "destinationUrl: Destination URL must be an absolute", "revenue: Enter an amount"} {
		if !strings.Contains(fmt.Sprint(errs), want) {
			t.Errorf("offer form errors %v: no %q", errs, want)
		}
	}
	b.shot("offer-new-errors")
	b.fill(`form[action="/dashboard/offers"]`, map[string]string{"name": "Trail Shoes", "destinationUrl": "https://shop.example/trail?c={click_id}", "revenue": "10.00", "payout": "3.00", "daily": "500"})
	b.submit(`form[action="/dashboard/offers"] button`, `^/dashboard/offers/off_`)
	offerID := strings.TrimPrefix(run(b, "location", chromedp.Evaluate[string]("location.pathname")), "/dashboard/offers/")
	b.shot("offer")
	b.openOK("/dashboard/offers", `a[href="/dashboard/offers/`+offerID+`"]`)
	b.shot("offers")

	// --- A partner applies on the public page, in a browser of its own.
	b.openOK("/dashboard/partners", `[data-apply-link]`)
	applyURL := b.text(`[data-apply-link]`)
	if applyURL != base+"/apply/"+brandID {
		t.Errorf("application link %q, want %s/apply/%s", applyURL, base, brandID)
	}
	p := &tab{t: t, ctx: newBrowser(t), base: base, shots: shots}
	p.openOK("/apply/"+brandID, `form[action="/apply/`+brandID+`"]`)
	if h := p.text("h1"); h != "Partner with Acme Shoes" {
		t.Errorf("application page heading %q", h)
	}
	p.shot("apply")
	p.fill("form", map[string]string{"email": "not an address", "website": "ftp://x"})
	p.submit("form button", `^/apply/`)
	perrs := p.eval(`Object.fromEntries(Array.from(document.querySelectorAll(".field-error")).map(e => [e.id, e.textContent]))`).(map[string]any)
	for _, id := range []string{"name-error", "email-error", "website-error"} {
		if perrs[id] == nil {
			t.Errorf("no error beside %s: %v", strings.TrimSuffix(id, "-error"), perrs)
		}
	}
	p.shot("apply-errors")
	partnerName := `<script>window.__pwned = "name"</script>Pat <i>Reviews</i>`
	p.fill("form", map[string]string{"name": partnerName, "email": "pat@reviews.example", "website": "https://reviews.example", "message": "I review trail shoes."})
	p.submit("form button", `^/apply/`)
	if h := p.text("h1"); !strings.Contains(h, partnerName) {
		t.Errorf("after applying: %q", h)
	}
	p.shot("apply-done")

	// --- The brand approves; the name shows as text, and nothing ran.
	b.openOK("/dashboard/partners?status=applied", `tr[data-partner]`)
	partnerID := run(b, "partner id", chromedp.Evaluate[string](`document.querySelector("tr[data-partner]").dataset.partner`))
	if got := b.text(`tr[data-partner] td a`); got != partnerName {
		t.Errorf("the partner's name shows as %q, want the text %q", got, partnerName)
	}
	if pwned := b.eval("window.__pwned === undefined && document.querySelectorAll('main script').length === 0"); pwned != true {
		t.Error("markup in a partner's name ran or became elements")
	}
	b.shot("partners-applied")
	b.submit(`tr[data-partner="`+partnerID+`"] form[action$="/approve"] button`, `^/dashboard/partners$`)
	if f := b.text(".flash"); !strings.Contains(f, "approved") {
		t.Errorf("after approving: %q", f)
	}
	b.openOK("/dashboard/partners/"+partnerID, ".facts")
	if st := b.text(".facts .status"); st != "active" {
		t.Errorf("partner status %q after approval", st)
	}
	b.shot("partner")

	// --- A bot's click through the partner's tracking link shows on Clicks
	// with its signal, its User-Agent and sub as text.
	link := b.text(`[data-tracking-link="` + offerID + `"]`)
	if link != base+"/c/"+offerID+"?pid="+partnerID {
		t.Errorf("the partner's tracking link is %q", link)
	}
	clickID := follow(t, link+"&sub1="+url.QueryEscape("<b>spring</b>"), botUA)
	b.openOK("/dashboard/clicks", `tr[data-click="`+clickID+`"]`)
	row := b.text(`tr[data-click="` + clickID + `"]`)
	if !strings.Contains(row, "bot_user_agent") || !strings.Contains(row, "80") || !strings.Contains(row, "<b>spring</b>") {
		t.Errorf("the click's row: %q; want score 80, bot_user_agent and the sub as text", row)
	}
	if ua := b.text(`tr[data-click="` + clickID + `"] [data-ua]`); ua != botUA {
		t.Errorf("the User-Agent shows as %q, want the text %q", ua, botUA)
	}
	if pwned := b.eval("window.__pwned === undefined && document.querySelectorAll('main script, main td b').length === 0"); pwned != true {
		t.Error("markup in a User-Agent or sub ran or became elements")
	}
	if risky := b.eval(`document.querySelector('tr[data-click="` + clickID + `"]').classList.contains("risk")`); risky != true {
		t.Error("a click scoring 80 is not marked high-risk at the default threshold of 70")
	}
	b.shot("clicks")
	b.openOK("/dashboard/clicks/"+clickID, ".signals")
	b.shot("click")

	// --- Settings → Fraud: a threshold out of range is refused beside the
	// field; 85 is saved, and the next bot click (80) is not high-risk.
	b.openOK("/dashboard/settings/fraud", "form[data-fraud-settings]")
	b.shot("fraud")
	b.fill("form[data-fraud-settings]", map[string]string{"threshold": "150"})
	b.submit("form[data-fraud-settings] button", `^/dashboard/settings/fraud$`)
	if msg := b.text("#threshold-error"); !strings.Contains(msg, "Threshold must be a whole number from 0 to 100") {
		t.Errorf("threshold 150: %q beside the field", msg)
	}
	b.shot("fraud-errors")
	b.fill("form[data-fraud-settings]", map[string]string{"threshold": "85"})
	b.submit("form[data-fraud-settings] button", `^/dashboard/settings/fraud$`)
	if f := b.text(".flash"); !strings.Contains(f, "saved") {
		t.Errorf("after saving the threshold: %q", f)
	}
	if th := s.call(t, "GET", "/api/v1/fraud/settings", key, nil).expect(t, "fraud settings", 200).object(t)["threshold"]; th != 85.0 {
		t.Errorf("the API says threshold %s after the page saved 85", th)
	}
	calmer := follow(t, link, botUA)
	// Blocking the loopback range makes the next click, from a browser,
	// score 100 with blocked_ip.
	b.fill("form[data-block-ip]", map[string]string{"cidr": "127.0.0.0/8", "note": "the test's own <b>address</b>"})
	b.submit("form[data-block-ip] button", `^/dashboard/settings/fraud$`)
	if row := b.text(`tr[data-blocked="127.0.0.0/8"]`); !strings.Contains(row, "the test's own <b>address</b>") {
		t.Errorf("the blocked range's row: %q", row)
	}
	blocked := follow(t, link, browserUA)
	b.openOK("/dashboard/clicks?minScore=81", "main")
	rows := b.eval(`Array.from(document.querySelectorAll("tr[data-click]")).map(r => r.dataset.click + " " + r.className + " " + r.querySelector("[data-signals]").innerText)`).([]any)
	if len(rows) != 1 || !strings.HasPrefix(rows[0].(string), blocked+" risk blocked_ip") {
		t.Errorf("clicks scoring over 81: %v; want only the blocked one (%s), high-risk", rows, blocked)
	}
	if risky := b.eval(`!!document.querySelector('tr[data-click="` + calmer + `"]')`); risky != false {
		t.Error("the click scoring 80 passed the filter minScore=81")
	}
	b.openOK("/dashboard/settings/fraud", `tr[data-blocked="127.0.0.0/8"]`)
	b.shot("fraud-blocked")
	b.submit(`tr[data-blocked="127.0.0.0/8"] button`, `^/dashboard/settings/fraud$`)

	// --- A conversion recorded over the API shows on Conversions and Overview.
	s.call(t, "POST", "/api/v1/conversions", key, map[string]any{
		"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1001", "sub1": "newsletter",
	}).expect(t, "POST /api/v1/conversions", 201)
	b.openOK("/dashboard/conversions", "tr[data-conversion]")
	if row := b.text("tr[data-conversion]"); !strings.Contains(row, "Trail Shoes") || !strings.Contains(row, "10.00 USD") || !strings.Contains(row, "order-1001") {
		t.Errorf("conversions row: %q", row)
	}
	b.shot("conversions")
	b.openOK("/dashboard", ".stats")
	if n, rev := b.text(`[data-stat="conversions"]`), b.text(`[data-stat="revenue"]`); n != "1" || rev != "10.00 USD" {
		t.Errorf("overview today: %q conversions, revenue %q; want 1 and 10.00 USD", n, rev)
	}
	if n := b.text(`[data-stat="clicks"]`); n != "3" {
		t.Errorf("overview: %q clicks today, want 3", n)
	}
	if hr := b.text(`[data-stat="clicks"] + .bad`); hr != "2 high-risk" {
		t.Errorf("overview: %q, want 2 high-risk (the first bot click at 70, the blocked one)", hr)
	}
	b.do("the chart is drawn", chromedp.WaitVisible(chromedp.CSS("figure.chart svg rect.barfill")))
	b.do("the high-risk part of today's clicks", chromedp.WaitVisible(chromedp.CSS("figure.chart svg rect.barpart")))
	b.shot("overview")

	// --- A webhook to a failing loopback receiver: failed attempts with the
	// receiver's body in the delivery log, then a retry from the page.
	rcv := newFailingReceiver(t)
	b.openOK("/dashboard/webhooks", `form[action="/dashboard/webhooks"]`)
	b.fill(`form[action="/dashboard/webhooks"]`, map[string]string{"url": rcv.srv.URL + "/hooks"})
	b.submit(`form[action="/dashboard/webhooks"] button`, `^/dashboard/webhooks$`)
	secret := b.text("[data-secret]")
	if !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("webhook secret %q", secret)
	}
	b.shot("webhooks-created")
	b.openOK("/dashboard/webhooks", "tr[data-subscription]")
	subA := run(b, "the webhook's id", chromedp.Evaluate[string](`document.querySelector("tr[data-subscription]").dataset.subscription`))
	if strings.Contains(b.text("main"), secret) {
		t.Error("the webhook secret is shown again")
	}
	// A second webhook to the same receiver, to be brought back with
	// Enable and Recover.
	b.fill(`form[action="/dashboard/webhooks"]`, map[string]string{"url": rcv.srv.URL + "/second"})
	b.submit(`form[action="/dashboard/webhooks"] button`, `^/dashboard/webhooks$`)
	subB := run(b, "the second webhook's id", chromedp.Evaluate[string](`Array.from(document.querySelectorAll("tr[data-subscription]")).map(r => r.dataset.subscription).find(id => id !== "`+subA+`")`))
	for _, sub := range []string{subA, subB} {
		b.submit(`tr[data-subscription="`+sub+`"] form[action$="/test"] button`, `^/dashboard/webhooks$`)
	}
	deliveryID := waitForDelivery(t, b, "failed", subA)
	deliveryB := waitForDelivery(t, b, "failed", subB)
	// A delivery that failed every attempt disabled both; the list says so
	// and counts it.
	b.openOK("/dashboard/webhooks", "tr[data-subscription]")
	for _, sub := range []string{subA, subB} {
		health := b.text(`tr[data-subscription="` + sub + `"] [data-health]`)
		if !strings.Contains(health, "disabled") || !strings.Contains(health, "1 failed delivery in a row") || !strings.Contains(health, "last success: never") {
			t.Errorf("webhook %s health: %q; want disabled after 1 failed delivery", sub, health)
		}
	}
	b.shot("webhooks")
	b.openOK("/dashboard/activity/deliveries/"+deliveryID, ".attempts")
	attempts := b.eval(`Array.from(document.querySelectorAll(".attempts li")).map(li => [li.querySelector(".attempt-head").innerText, (li.querySelector("[data-response]") || {}).textContent])`).([]any)
	if len(attempts) != 7 {
		t.Errorf("%d attempts shown, want 7", len(attempts))
	}
	for _, a := range attempts {
		pair := a.([]any)
		if !strings.Contains(pair[0].(string), "HTTP 500") || pair[1] != receiverBody {
			t.Errorf("attempt %v: want HTTP 500 and the body %q as text", pair, receiverBody)
			break
		}
	}
	if pwned := b.eval("window.__pwned === undefined && document.querySelectorAll('main script, main b').length === 0"); pwned != true {
		t.Error("markup in a receiver's response ran or became elements")
	}
	b.shot("delivery-failed")
	rcv.healthy.Store(true)
	// Its webhook is disabled: Retry is refused until it is enabled, as
	// Recover is below.
	b.submit(`form[action$="/retry"] button`, `/retry$`)
	if msg := b.pageText(); !strings.Contains(msg, "enable it before retrying") {
		t.Errorf("retrying a delivery of a disabled webhook: %q", msg)
	}
	b.openOK("/dashboard/webhooks/"+subA, `form[action$="/enable"]`)
	b.submit(`form[action$="/enable"] button`, `^/dashboard/webhooks/sub_`)
	b.openOK("/dashboard/activity/deliveries/"+deliveryID, `form[action$="/retry"]`)
	b.submit(`form[action$="/retry"] button`, `^/dashboard/activity/deliveries/wh_`)
	waitForStatus(t, b, deliveryID, "succeeded")
	b.shot("delivery-succeeded")
	b.openOK("/dashboard/activity/deliveries?type=webhook", "tr[data-delivery]")
	b.shot("deliveries")

	// --- The second webhook: Recover is refused while it is disabled (the
	// reason beside the date); Enable, then Recover sends the failed
	// delivery again, and it succeeds.
	b.openOK("/dashboard/webhooks/"+subB, "form[data-recover]")
	b.submit("form[data-recover] button", `^/dashboard/webhooks/sub_`)
	if msg := b.text("#since-error"); !strings.Contains(msg, "enable it before recovering") {
		t.Errorf("recovering a disabled webhook: %q beside the date", msg)
	}
	b.shot("webhook-disabled")
	b.submit(`form[action$="/enable"] button`, `^/dashboard/webhooks/sub_`)
	if health := b.text("[data-health]"); !strings.Contains(health, "enabled") || strings.Contains(health, "in a row") {
		t.Errorf("after Enable: %q; want enabled with no failures counted", health)
	}
	b.submit("form[data-recover] button", `^/dashboard/webhooks/sub_`)
	if f := b.text(".flash"); !strings.Contains(f, "queued again: 1") {
		t.Errorf("after Recover: %q", f)
	}
	waitForStatus(t, b, deliveryB, "succeeded")
	b.openOK("/dashboard/webhooks/"+subB, "[data-health]")
	if last := b.text("[data-last-success]"); strings.Contains(last, "never") {
		t.Errorf("after the recovered delivery succeeded: %q", last)
	}
	// Rotating the secret shows the new one once, with the 24 h overlap.
	b.do("tick rotate", chromedp.Click(chromedp.CSS(`form[data-edit-webhook] input[name="rotate"]`)))
	b.submit("form[data-edit-webhook] button", `^/dashboard/webhooks/sub_`)
	if rotated := b.text("[data-secret]"); !strings.HasPrefix(rotated, "whsec_") || rotated == secret {
		t.Errorf("the rotated secret %q", rotated)
	}
	if note := b.text(".secret"); !strings.Contains(note, "For 24 hours") || !strings.Contains(note, "previous secret signs too") {
		t.Errorf("the rotation notice: %q", note)
	}
	b.shot("webhook-rotated")

	// --- A partner postback set on the partner's page: a macro that does
	// not exist is refused beside the URL; the test postback shows in the
	// delivery log as a postback, its URL filled in.
	pb := newRecordingReceiver(t)
	b.openOK("/dashboard/partners/"+partnerID, "form[data-postback-form]")
	b.fill("form[data-postback-form]", map[string]string{"url": pb.srv.URL + "/pb?click={click_id}&rev={revenue}"})
	b.submit("form[data-postback-form] button", `^/dashboard/partners/prt_`)
	if msg := b.text("#pb-url-error"); !strings.Contains(msg, "{revenue} is not a macro") {
		t.Errorf("a postback with {revenue}: %q beside the URL", msg)
	}
	b.shot("partner-postback-error")
	b.fill("form[data-postback-form]", map[string]string{"url": pb.srv.URL + "/pb?click={click_id}&amount={payout}&status={status}"})
	b.submit("form[data-postback-form] button", `^/dashboard/partners/prt_`)
	if f := b.text(".flash"); !strings.Contains(f, "postback was saved") {
		t.Errorf("after saving the postback: %q", f)
	}
	b.submit(`form[action$="/postback/test"] button`, `^/dashboard/partners/prt_`)
	b.shot("partner-postback")
	b.submit("[data-postback-deliveries]", `^/dashboard/activity/deliveries$`)
	if typ := b.eval(`document.querySelector("select[name=type]").value + " " + document.querySelector("select[name=partnerId]").value`); typ != "postback "+partnerID {
		t.Errorf("the partner's postback deliveries link opens the log filtered by %q", typ)
	}
	pbDelivery := waitForDelivery(t, b, "succeeded", "type=postback&partnerId="+partnerID)
	row = b.text(`tr[data-delivery="` + pbDelivery + `"]`)
	if !strings.Contains(row, "postback") || !strings.Contains(row, pb.srv.URL+"/pb?click=clk_test&amount=1.23&status=approved") || !strings.Contains(row, "HTTP 200") {
		t.Errorf("the test postback's row: %q", row)
	}
	if got := pb.paths(); len(got) != 1 || got[0] != "GET /pb?click=clk_test&amount=1.23&status=approved" {
		t.Errorf("the partner's server got %v", got)
	}
	b.shot("deliveries-postbacks")

	// --- The offer edited: payout and attribution window.
	b.openOK("/dashboard/offers/"+offerID+"/edit", "form[data-offer-form]")
	b.fill("form[data-offer-form]", map[string]string{"payout": "3.5.0"})
	b.submit("form[data-offer-form] button", `^/dashboard/offers/off_`)
	if msg := b.text(".field-error"); !strings.Contains(msg, "Enter an amount") {
		t.Errorf("a bad payout: %q", msg)
	}
	b.shot("offer-edit-errors")
	b.fill("form[data-offer-form]", map[string]string{"payout": "3.50", "attributionWindowDays": "45"})
	b.submit("form[data-offer-form] button", `^/dashboard/offers/off_`)
	if facts := b.text(".facts"); !strings.Contains(facts, "3.50 USD") || !strings.Contains(facts, "45 days") {
		t.Errorf("the offer after editing: %q", facts)
	}

	// --- An API key made on Settings → API Keys works, then is revoked.
	b.openOK("/dashboard/settings/keys", `form[action="/dashboard/settings/keys"]`)
	b.fill(`form[action="/dashboard/settings/keys"]`, map[string]string{"name": "CI deploys"})
	b.submit(`form[action="/dashboard/settings/keys"] button`, `^/dashboard/settings/keys$`)
	newKey := b.text("[data-new-key]")
	if !strings.HasPrefix(newKey, "tally_sk_") {
		t.Fatalf("new key %q", newKey)
	}
	b.shot("keys-created")
	s.call(t, "GET", "/api/v1/offers", newKey, nil).expect(t, "GET /api/v1/offers with the key made on the page", 200)
	b.openOK("/dashboard/settings/keys", "tr[data-key]")
	if strings.Contains(b.text("main"), newKey) {
		t.Error("the key's secret is shown again")
	}
	keyRow := run(b, "the new key's row", chromedp.Evaluate[string](`Array.from(document.querySelectorAll("tr[data-key]")).find(r => r.innerText.includes("CI deploys")).dataset.key`))
	if used := b.text(`tr[data-key="` + keyRow + `"]`); !strings.Contains(used, "just now") {
		t.Errorf("the key's row after a request: %q; want last used just now", used)
	}
	b.shot("keys")
	b.submit(`tr[data-key="`+keyRow+`"] form button`, `^/dashboard/settings/keys/.*/revoke$`)
	b.submit(`[data-confirm] form button`, `^/dashboard/settings/keys$`) // revoking asks first
	s.call(t, "GET", "/api/v1/offers", newKey, nil).expect(t, "GET /api/v1/offers with the revoked key", 401)

	// --- Reports, and the CSV download.
	b.openOK("/dashboard/reports", "figure.chart")
	b.shot("reports")
	b.openOK("/dashboard/reports?time=day&offer=1&timezone=America/New_York", "table")
	downloads := t.TempDir()
	if _, err := chromedp.CallBrowser(b.ctx, browser.SetDownloadBehavior, browser.SetDownloadBehaviorParams{
		Behavior: browser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: downloads,
	}); err != nil {
		t.Fatal(err)
	}
	b.do("download the CSV", chromedp.Click(chromedp.CSS(`a[download]`)))
	csvRows := readDownload(t, downloads)
	if len(csvRows) != 2 || strings.Join(csvRows[0], ",") != "day,offerId,currency,conversions,pending,approved,rejected,reversed,revenueCents,payoutCents,profitCents,clicks,highRiskClicks" ||
		csvRows[1][1] != offerID || csvRows[1][3] != "1" || csvRows[1][8] != "1000" || csvRows[1][11] != "3" || csvRows[1][12] != "2" {
		t.Errorf("downloaded CSV %q", csvRows)
	}

	// --- Settings → Postback token: the token is shown once, and a GET
	// postback with it records a conversion of the bot's first click, which
	// the Clicks page then links to.
	b.openOK("/dashboard/settings/postback-token", "main form")
	b.submit(`form[action="/dashboard/settings/postback-token"] button`, `^/dashboard/settings/postback-token$`)
	pbToken := b.text("[data-new-token]")
	if !strings.HasPrefix(pbToken, "tally_pb_") {
		t.Fatalf("postback token %q", pbToken)
	}
	b.shot("postback-token")
	conv := s.call(t, "GET", "/postback?click_id="+clickID+"&txn_id=order-2&token="+pbToken, "", nil).expect(t, "GET /postback", 201).object(t)
	b.openOK("/dashboard/clicks", `tr[data-click="`+clickID+`"] [data-conversion-link]`)
	b.submit(`tr[data-click="`+clickID+`"] [data-conversion-link]`, `^/dashboard/conversions/cnv_`)
	if got := strings.TrimPrefix(run(b, "location", chromedp.Evaluate[string]("location.pathname")), "/dashboard/conversions/"); got != str(conv, "conversionId") {
		t.Errorf("the click links to conversion %s, want %s", got, str(conv, "conversionId"))
	}

	// --- Another brand's ids answer 404 in the pages.
	other := s.call(t, "POST", "/api/v1/offers", otherKey, offerInput("Other offer")).expect(t, "another brand's offer", 201).object(t)
	otherPartner := s.call(t, "POST", "/api/public/brands/"+otherBrand+"/applications", "", map[string]any{"name": "Ola", "email": "ola@other.example"}).expect(t, "another brand's partner", 201).object(t)
	for _, path := range []string{"/dashboard/offers/" + str(other, "id"), "/dashboard/offers/" + str(other, "id") + "/edit", "/dashboard/partners/" + str(otherPartner, "id"),
		"/dashboard/conversions/cnv_01kb7k3m5n6p7q8r9s0t1v2w3x", "/dashboard/clicks/clk_01kb7k3m5n6p7q8r9s0t1v2w3x", "/dashboard/webhooks/sub_01kb7k3m5n6p7q8r9s0t1v2w3x"} {
		if status := b.open(path); status != 404 || !strings.Contains(b.text("h1"), "Not found") {
			t.Errorf("%s: status %d, %q; want 404 Not found", path, status, b.text("h1"))
		}
	}
	b.shot("not-found")

	// --- A form without its CSRF token is refused and changes nothing.
	client := sessionClient(t, b, base)
	for name, form := range map[string]url.Values{"no token": {}, "a wrong token": {"csrf": {strings.Repeat("0", 64)}}} {
		resp, err := client.PostForm(base+"/dashboard/partners/"+partnerID+"/ban", form)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 403 {
			t.Errorf("ban with %s: status %d, want 403", name, resp.StatusCode)
		}
	}
	if st := str(s.call(t, "GET", "/api/v1/partners/"+partnerID, key, nil).expect(t, "the partner", 200).object(t), "status"); st != "active" {
		t.Errorf("after refused forms the partner is %s", st)
	}

	// --- Wrong passwords are throttled per e-mail address, also for the right one after them.
	anon := anonymousClient(t)
	for i := range 10 {
		if status, body := signInOver(t, anon, base, "ops@acme.example", "wrong password "+fmt.Sprint(i)); status != 401 {
			t.Fatalf("wrong password %d: status %d\n%s", i+1, status, body)
		}
	}
	status, body := signInOver(t, anon, base, "ops@acme.example", password)
	if status != 429 || !strings.Contains(body, "Too many sign-in attempts") {
		t.Errorf("the right password after 10 wrong ones: status %d; want 429 with a message", status)
	}
	if status, _ := signInOver(t, anonymousClient(t), base, email, password); status != 303 {
		t.Errorf("another address from the same client: status %d, want 303 (signed in)", status)
	}

	// --- Every page at 390 px wide.
	if shots != "" {
		b.do("narrow viewport", chromedp.EmulateViewport(390, 844, chromedp.EmulateScale(2)))
		for name, path := range map[string]string{
			"overview": "/dashboard", "offers": "/dashboard/offers", "offer-new": "/dashboard/offers/new", "offer": "/dashboard/offers/" + offerID,
			"partners": "/dashboard/partners", "partner": "/dashboard/partners/" + partnerID, "conversions": "/dashboard/conversions",
			"reports": "/dashboard/reports", "webhooks": "/dashboard/webhooks", "deliveries": "/dashboard/activity/deliveries",
			"delivery": "/dashboard/activity/deliveries/" + deliveryID, "keys": "/dashboard/settings/keys", "apply": "/apply/" + brandID,
			"clicks": "/dashboard/clicks", "click": "/dashboard/clicks/" + clickID, "fraud": "/dashboard/settings/fraud",
			"postback-token": "/dashboard/settings/postback-token", "webhook": "/dashboard/webhooks/" + subB,
			"offer-edit": "/dashboard/offers/" + offerID + "/edit", "deliveries-postbacks": "/dashboard/activity/deliveries?type=postback&partnerId=" + partnerID,
			"delivery-postback": "/dashboard/activity/deliveries/" + pbDelivery,
		} {
			b.openOK(path, "main")
			b.shot(name + "-390")
			if w := b.eval("document.documentElement.scrollWidth"); w.(float64) > 390 {
				t.Errorf("%s at 390 px: the page is %v px wide (it scrolls sideways)", path, w)
			}
		}
		b.do("wide viewport", chromedp.EmulateViewport(1280, 800))
	}
}

// waitForDelivery polls the delivery log until a delivery of a webhook
// (sub_…), or matching a filter query (type=…&partnerId=…), has the status,
// and returns its id.
func waitForDelivery(t *testing.T, b *tab, status, filter string) string {
	t.Helper()
	if strings.HasPrefix(filter, "sub_") {
		filter = "subscriptionId=" + filter
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		b.openOK("/dashboard/activity/deliveries?status="+status+"&"+filter, "main")
		id := run(b, "a delivery", chromedp.Evaluate[string](`(document.querySelector("tr[data-delivery]") || {dataset: {delivery: ""}}).dataset.delivery`))
		if id != "" {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s delivery in the log after a minute\n%s", status, b.pageText())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitForStatus reloads a delivery's page until it shows the status.
func waitForStatus(t *testing.T, b *tab, deliveryID, status string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		b.openOK("/dashboard/activity/deliveries/"+deliveryID, ".facts")
		if got := b.text(".facts .status"); got == status {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("delivery %s did not become %s\n%s", deliveryID, status, b.pageText())
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// readDownload waits for the one file Chromium downloads into dir and
// reads it as CSV.
func readDownload(t *testing.T, dir string) [][]string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasSuffix(e.Name(), ".crdownload") {
				continue
			}
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			rows, err := csv.NewReader(f).ReadAll()
			if err != nil {
				t.Fatalf("the download is not CSV: %v", err)
			}
			return rows
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing was downloaded")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sessionClient is an HTTP client with the browser's session cookie, to
// send forms the pages would not send.
func sessionClient(t *testing.T, b *tab, base string) *http.Client {
	t.Helper()
	res, err := chromedp.Call(b.ctx, network.GetCookies, network.GetCookiesParams{URLs: []string{base + "/dashboard"}})
	if err != nil {
		t.Fatal(err)
	}
	client := anonymousClient(t)
	u, _ := url.Parse(base + "/dashboard")
	var cookies []*http.Cookie
	for _, c := range res.Cookies {
		cookies = append(cookies, &http.Cookie{Name: c.Name, Value: c.Value, Path: c.Path})
	}
	if len(cookies) == 0 {
		t.Fatal("the browser has no session cookie")
	}
	client.Jar.SetCookies(u, cookies)
	return client
}

func anonymousClient(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, Timeout: 15 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

var formTokenRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// signInOver signs in with a plain HTTP client, as a script would: it reads
// the form's token and sends the form. It returns the status and body.
func signInOver(t *testing.T, client *http.Client, base, email, password string) (int, string) {
	t.Helper()
	resp, err := client.Get(base + "/dashboard/sign-in")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := formTokenRE.FindSubmatch(page)
	if m == nil {
		t.Fatalf("no form token on the sign-in page:\n%s", page)
	}
	resp, err = client.PostForm(base+"/dashboard/sign-in", url.Values{"csrf": {string(m[1])}, "email": {email}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}
