// Package browsertest drives pages in a real headless Chromium (Debian's
// chromium package, which scripts/test.sh installs) with chromedp, for the
// tests of Tally's sites: what a person sees, at 1280 and at 390 px wide.
// One browser and one tab serve a test binary, whose tests run one at a
// time. Screenshots of the embedded store's runs (tests named …/bolt) go
// to screenshots/ at the repository root (gitignored), to look at.
//
// Only tests import it.
package browsertest

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

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/tally-hq/tally/internal/reporoot"
)

var browser struct {
	once   sync.Once
	ctx    context.Context
	cancel func()
	err    error
}

// Stop ends the shared browser, if a test started it: a test binary's
// TestMain calls it after the tests.
func Stop() {
	if browser.cancel != nil {
		browser.cancel()
	}
}

// shared starts headless Chromium once, skipping the test where there is
// none (failing it in CI, which must not skip silently).
func shared(t *testing.T) context.Context {
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

// Tab is the browser's tab on a site.
type Tab struct {
	T     *testing.T
	ctx   context.Context
	base  string
	shots string // the folder for screenshots; "" takes none
}

// NewTab returns the tab on the site at base (http://127.0.0.1:port). Its
// cookies are the browser's, which the binary's tests share: a test signs
// in to its own site.
func NewTab(t *testing.T, base string) *Tab {
	t.Helper()
	// One tab for the binary's tests: a tab of its own for each
	// (chromedp.NewContext) hangs in Evaluate.
	b := &Tab{T: t, ctx: shared(t), base: base}
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
	return b
}

// Do runs actions with a time limit a loaded machine still meets.
func (b *Tab) Do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.T.Fatalf("%s: %v", what, err)
	}
}

// Width sets the viewport's width (and a phone's scale at 390 px).
func (b *Tab) Width(px int64) {
	b.T.Helper()
	if px < 600 {
		b.Do("viewport", chromedp.EmulateViewport(px, 844, chromedp.EmulateScale(2)))
		return
	}
	b.Do("viewport", chromedp.EmulateViewport(px, 800))
}

// Open loads a page and returns its HTTP status.
func (b *Tab) Open(path string) int64 {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(b.base+path))
	if err != nil {
		b.T.Fatalf("open %s: %v", path, err)
	}
	if resp == nil {
		return 0
	}
	return resp.Status
}

// Eval runs JavaScript in the page and decodes its result into a T.
func Eval[T any](b *Tab, js string) T {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js))
	if err != nil {
		b.T.Fatalf("%s: %v", js, err)
	}
	return v
}

// Text is the visible text of the first element sel matches ("" if none).
func (b *Tab) Text(sel string) string {
	b.T.Helper()
	return Eval[string](b, fmt.Sprintf(`(document.querySelector(%q) || {innerText: ""}).innerText`, sel))
}

// Fill sets form fields by name within the form sel.
func (b *Tab) Fill(form string, values map[string]string) {
	b.T.Helper()
	raw, _ := json.Marshal(values)
	js := fmt.Sprintf(`(() => { const f = document.querySelector(%q); if (!f) return "no form";
		for (const [k, v] of Object.entries(%s)) { const el = f.querySelector("[name='" + k + "']"); if (!el) return "no field " + k; el.value = v; }
		return "ok"; })()`, form, raw)
	if got := Eval[string](b, js); got != "ok" {
		b.T.Fatalf("fill %s: %s", form, got)
	}
}

// Submit clicks a button and waits for the page at a path matching pathRE
// to load.
func (b *Tab) Submit(button, pathRE string) {
	b.T.Helper()
	b.Leave("click "+button, chromedp.Click(chromedp.CSS(button)), pathRE)
}

// Leave runs an action that leaves the page (a click, Enter in a form)
// and waits for the page at a path matching pathRE to load.
func (b *Tab) Leave(what string, action chromedp.Action[chromedp.Void], pathRE string) {
	b.T.Helper()
	mark := Eval[float64](b, "window.__page = Math.random()")
	b.Do(what, action)
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
			b.T.Fatalf("after %s: no page at %s (%v, %v)\n%s", what, pathRE, state, err, b.Text("body"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Shot saves the whole page as <name>.png.
func (b *Tab) Shot(name string) {
	b.T.Helper()
	if b.shots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.T.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.T.Fatal(err)
	}
}

// AtBothWidths opens path at 1280 and at 390 px, takes a screenshot of
// each named name-1280 and name-390, and runs check at each width.
func (b *Tab) AtBothWidths(path, name string, check func(width int64)) {
	b.T.Helper()
	for _, w := range []int64{1280, 390} {
		b.Width(w)
		b.Open(path)
		b.Shot(fmt.Sprintf("%s-%d", name, w))
		check(w)
	}
	b.Width(1280)
}

// Offscreen lists the elements sel matches that reach past the viewport's
// right edge, or that sit in a box scrolled sideways out of view.
func (b *Tab) Offscreen(sel string) []string {
	b.T.Helper()
	return Eval[[]string](b, fmt.Sprintf(`Array.from(document.querySelectorAll(%q)).filter(e => {
		const r = e.getBoundingClientRect();
		if (r.right > window.innerWidth + 0.5 || r.left < -0.5) return true;
		for (let p = e.parentElement; p; p = p.parentElement) {
			const pr = p.getBoundingClientRect();
			if (getComputedStyle(p).overflowX !== "visible" && (r.right > pr.right + 0.5 || r.left < pr.left - 0.5)) return true;
		}
		return false;
	}).map(e => (e.innerText || e.textContent || e.tagName).trim().slice(0, 40))`, sel))
}

// Awaited is Eval of a promise: its value once it resolves.
func Awaited[T any](b *Tab, js string) T {
	b.T.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	if err != nil {
		b.T.Fatalf("%s: %v", js, err)
	}
	return v
}

// Scripts switches the tab's JavaScript on or off (for the pages it loads
// from now on).
func (b *Tab) Scripts(on bool) {
	b.T.Helper()
	b.Do("switch scripts", func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := cdp.Call(ctx, t, emulation.SetScriptExecutionDisabled, emulation.SetScriptExecutionDisabledParams{Value: !on})
		return chromedp.Void{}, err
	})
}

// AllowClipboard lets the site's pages write and read the clipboard, as a
// person's click on a Copy button may.
func (b *Tab) AllowClipboard() {
	b.T.Helper()
	for _, name := range []string{"clipboard-write", "clipboard-read"} {
		b.Do("allow "+name, func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
			_, err := cdp.Call(ctx, t, cdpbrowser.SetPermission, cdpbrowser.SetPermissionParams{
				Permission: &cdpbrowser.PermissionDescriptor{Name: name}, Setting: cdpbrowser.PermissionSettingGranted, Origin: b.base})
			return chromedp.Void{}, err
		})
	}
}
