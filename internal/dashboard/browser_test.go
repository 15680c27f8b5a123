package dashboard_test

// The pages in a real headless Chromium (Debian's chromium package, which
// scripts/test.sh installs), driven with chromedp against the dashboard on
// loopback: what a person sees, at 1280 and at 390 px wide. One browser
// and one tab serve the test binary; each test signs in to its own site.
// Screenshots of the embedded store's runs go to
// screenshots/ at the repository root (gitignored), to look at.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/tally-hq/tally/internal/reporoot"
)

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

// stopBrowser ends the shared browser, if a test started it.
func stopBrowser() {
	if browser.cancel != nil {
		browser.cancel()
	}
}

// sharedBrowser starts headless Chromium once, skipping the test where
// there is none (failing it in CI, which must not skip silently).
func sharedBrowser(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("no chromium on PATH: scripts/test.sh installs Debian's chromium package")
		}
		t.Skip("no chromium on PATH: run scripts/test.sh (it installs Debian's chromium package)")
	}
	browser.once.Do(func() {
		dir, err := os.MkdirTemp("", "tally-chromium-")
		if err != nil {
			browser.err = err
			return
		}
		opts := append(chromedp.DefaultExecAllocatorOptions[:],
			chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
			chromedp.Flag("disable-quic", true), chromedp.Flag("disable-component-update", true),
			chromedp.UserDataDir(dir), chromedp.WindowSize(1280, 800))
		alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
		ctx, cancel := chromedp.NewContext(alloc)
		browser.ctx = ctx
		browser.cancel = func() { cancel(); cancelAlloc(); os.RemoveAll(dir) }
		browser.err = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	})
	if browser.err != nil {
		t.Fatalf("start chromium: %v", browser.err)
	}
	return browser.ctx
}

// tab is the browser's tab on a site.
type tab struct {
	t     *testing.T
	ctx   context.Context
	base  string
	shots string // the folder for screenshots; "" takes none
}

// newTab opens a tab on s signed in as its owner. Screenshots are taken
// on the embedded store's run.
func (s *site) newTab(t *testing.T) *tab {
	t.Helper()
	// One tab for the binary's tests, which run one at a time: a tab of
	// its own for each (chromedp.NewContext) hangs in Evaluate.
	b := &tab{t: t, ctx: sharedBrowser(t), base: s.srv.URL}
	if strings.HasSuffix(t.Name(), "/bolt") {
		root, err := reporoot.Find()
		if err != nil {
			t.Fatal(err)
		}
		b.shots = filepath.Join(root, "screenshots")
		if err := os.MkdirAll(b.shots, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b.open("/dashboard/sign-in")
	b.fill(`form[action="/dashboard/sign-in"]`, map[string]string{"email": "owner@acme.example", "password": pw})
	b.submit(`form[action="/dashboard/sign-in"] button`, `^/dashboard$`)
	return b
}

// do runs actions with a time limit a loaded machine still meets.
func (b *tab) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// width sets the viewport's width (and a phone's scale at 390 px).
func (b *tab) width(px int64) {
	b.t.Helper()
	if px < 600 {
		b.do("viewport", chromedp.EmulateViewport(px, 844, chromedp.EmulateScale(2)))
		return
	}
	b.do("viewport", chromedp.EmulateViewport(px, 800))
}

// open loads a page and returns its HTTP status.
func (b *tab) open(path string) int64 {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+path))
	if err != nil {
		b.t.Fatalf("open %s: %v", path, err)
	}
	if resp == nil {
		return 0
	}
	return resp.Status
}

// eval runs JavaScript in the page and decodes its result into a T.
func eval[T any](b *tab, js string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.t.Fatalf("%s: %v", js, err)
	}
	return v
}

// text is the visible text of the first element sel matches ("" if none).
func (b *tab) text(sel string) string {
	b.t.Helper()
	return eval[string](b, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel))
}

// fill sets form fields by name within the form sel.
func (b *tab) fill(form string, values map[string]string) {
	b.t.Helper()
	raw, _ := json.Marshal(values)
	js := fmt.Sprintf(`(() => { const f = document.querySelector(%q); if (!f) return "no form";
		for (const [k, v] of Object.entries(%s)) { const el = f.querySelector("[name='" + k + "']"); if (!el) return "no field " + k; el.value = v; }
		return "ok"; })()`, form, raw)
	if got := eval[string](b, js); got != "ok" {
		b.t.Fatalf("fill %s: %s", form, got)
	}
}

// submit clicks a button and waits for the page at a path matching pathRE
// to load.
func (b *tab) submit(button, pathRE string) {
	b.t.Helper()
	b.leave("click "+button, chromedp.Click(chromedp.CSS(button)), pathRE)
}

// leave runs an action that leaves the page (a click, Enter in a form)
// and waits for the page at a path matching pathRE to load.
func (b *tab) leave(what string, action chromedp.Action[chromedp.Void], pathRE string) {
	b.t.Helper()
	mark := eval[float64](b, "window.__page = Math.random()")
	b.do(what, action)
	re := regexp.MustCompile(pathRE)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		state, err := chromedp.Run(ctx, chromedp.Evaluate[[]any]("[window.__page === undefined ? -1 : window.__page, document.readyState, location.pathname]"))
		cancel()
		if err == nil && len(state) == 3 && state[0] != mark && state[1] == "complete" && re.MatchString(state[2].(string)) {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("after %s: no page at %s (%v, %v)\n%s", what, pathRE, state, err, b.text("body"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shot saves the whole page as <name>.png.
func (b *tab) shot(name string) {
	b.t.Helper()
	if b.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Fatal(err)
	}
}

// atBothWidths opens path at 1280 and at 390 px, takes a screenshot of
// each named name-1280 and name-390, and runs check at each width.
func (b *tab) atBothWidths(path, name string, check func(width int64)) {
	b.t.Helper()
	for _, w := range []int64{1280, 390} {
		b.width(w)
		b.open(path)
		b.shot(fmt.Sprintf("%s-%d", name, w))
		check(w)
	}
	b.width(1280)
}

// offscreen lists the elements sel matches that reach past the viewport's
// right edge, or that sit in a box scrolled sideways out of view.
func (b *tab) offscreen(sel string) []string {
	b.t.Helper()
	return eval[[]string](b, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).filter(e => {
		const r = e.getBoundingClientRect();
		if (r.right > window.innerWidth + 0.5 || r.left < -0.5) return true;
		for (let p = e.parentElement; p; p = p.parentElement) {
			const pr = p.getBoundingClientRect();
			if (getComputedStyle(p).overflowX !== "visible" && (r.right > pr.right + 0.5 || r.left < pr.left - 0.5)) return true;
		}
		return false;
	}).map(e => (e.innerText || e.textContent || e.tagName).trim().slice(0, 40))`, sel))
}
