// Package web is the framework of Tally's server-rendered pages: the
// dashboard at /dashboard and any other set of pages (a Site) mounted at a
// path of its own. It parses a site's page templates with the shared
// layout and partials, renders views, guards sessions, CSRF tokens and
// cross-origin forms, sets the security headers, asks before irreversible
// actions without JavaScript, and formats money, numbers and times for
// people. The stylesheet, icon and the one script (copy buttons, which
// the pages work without) are embedded here and served under each site's
// path.
//
// A site's templates are templates/*.html files of its fs.FS (an embed.FS,
// say): each page defines "content"; a file whose name starts with "_"
// holds the site's own partials. The shared templates are in templates/
// here.
package web

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
)

//go:embed templates/*.html
var sharedFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// Config describes a site.
type Config struct {
	Base   string // where the pages are mounted: "/dashboard"
	Name   string // what the pages are called: "Dashboard", the navigation's label
	Cookie string // the session cookie's name; its path is Base
	// Templates hold the site's pages and partials (see the package doc);
	// several file systems add up, so a package of pages brings its own.
	Templates []fs.FS
	Funcs     template.FuncMap // the site's own template functions
	// Flashes are the notices a redirect may ask for (?done=key): fixed
	// texts, so a link cannot make a page say anything else; "%d" is filled
	// in from ?n=.
	Flashes map[string]string
	Logger  *slog.Logger
}

// Site is a set of pages mounted at a path.
type Site struct {
	cfg         Config
	crossOrigin *http.CrossOriginProtection
	mu          sync.Mutex
	pages       map[string]map[string]*template.Template // by zone name, then page
}

// New returns the site cfg describes.
func New(cfg Config) *Site {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Site{cfg: cfg, crossOrigin: http.NewCrossOriginProtection()}
	s.crossOrigin.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Refuse(w, "This request came from another site",
			"Tally only accepts forms sent from its own pages. Go back, reload the page and try again.")
	}))
	return s
}

// NavItem is one entry of a navigation or a row of tabs; Section groups
// entries ("Activity ›").
type NavItem struct {
	Key, Label, Href, Section string
}

// View is what every page's template gets.
type View struct {
	Title     string
	Base      string // the site's path, filled in when rendered
	Area      string // the site's name, filled in when rendered
	Active    string // the key of the nav item the page belongs to
	Account   string // the signed-in account's name, beside the logo
	AccountID string // its id, as the name's title
	Email     string // who is signed in
	UserID    string // the signed-in user's id
	// ReadOnly is a signed-in user who may look but not change anything
	// (a viewer): pages leave out the forms that would change something.
	ReadOnly bool
	CSRF     string // the session's CSRF token, for the forms
	Nav      []NavItem
	Search   string // where the header's search box sends to; none when ""
	Flash    string // a notice after a redirect
	Tabs     []NavItem
	Tab      string // the current tab's key
	// Zone is the one the account counts its days in, and the pages'
	// times are written in; nil is UTC.
	Zone *time.Location
	Data any
}

// ZoneName is the name of the view's zone: "Pacific/Auckland", "UTC".
func (v View) ZoneName() string { return zoneOf(v.Zone).String() }

func zoneOf(loc *time.Location) *time.Location {
	if loc == nil {
		return time.UTC
	}
	return loc
}

// funcs are the template functions every page has.
var funcs = template.FuncMap{
	"money":    Money,
	"moneyIn":  MoneyIn,
	"when":     When,
	"whenPtr":  func(t *tally.Time) string { return whenPtr(t, time.UTC) },
	"number":   Number,
	"join":     strings.Join,
	"contains": slices.Contains[[]string],
	"query":    Query,
	"inc":      func(i int) int { return i + 1 },
	"list":     func(v ...string) []string { return v },
	"field":    NewField,
	"seconds":  func(t tally.Time) string { return seconds(t, time.UTC) },
	"sentence": FirstSentence,
	"lower":    strings.ToLower,
}

// templates are the pages in a zone: every page parsed with the layout
// and partials once per zone a view asks for, on first use (so a function
// that never renders a page never pays for it). A zone's pages differ in
// the functions that write times; the zones are those accounts chose.
func (s *Site) templates(zone *time.Location) map[string]*template.Template {
	s.mu.Lock()
	defer s.mu.Unlock()
	if pages, ok := s.pages[zone.String()]; ok {
		return pages
	}
	const layoutFile = "templates/layout.html"
	sources := append([]fs.FS{sharedFiles}, s.cfg.Templates...)
	layout := template.Must(template.New("layout").Funcs(funcs).Funcs(s.cfg.Funcs).Funcs(zoneFuncs(zone)).ParseFS(sharedFiles, layoutFile))
	type file struct {
		src  fs.FS
		name string
	}
	var files []file
	for i, src := range sources {
		names, err := fs.Glob(src, "templates/*.html")
		if err != nil {
			panic(err)
		}
		for _, name := range names {
			switch {
			case i == 0 && name == layoutFile:
			case strings.HasPrefix(path.Base(name), "_"):
				template.Must(layout.ParseFS(src, name))
			default:
				files = append(files, file{src, name})
			}
		}
	}
	pages := map[string]*template.Template{}
	for _, f := range files {
		page := strings.TrimSuffix(path.Base(f.name), ".html")
		pages[page] = template.Must(template.Must(layout.Clone()).ParseFS(f.src, f.name))
	}
	if s.pages == nil {
		s.pages = map[string]map[string]*template.Template{}
	}
	s.pages[zone.String()] = pages
	return pages
}

// zoneFuncs are the template functions that write times in a zone.
func zoneFuncs(zone *time.Location) template.FuncMap {
	return template.FuncMap{
		"when":    func(t tally.Time) string { return WhenIn(t, zone) },
		"whenPtr": func(t *tally.Time) string { return whenPtr(t, zone) },
		"seconds": func(t tally.Time) string { return seconds(t, zone) },
	}
}

// Render renders a page with status 200.
func (s *Site) Render(w http.ResponseWriter, page string, v View) {
	s.RenderStatus(w, http.StatusOK, page, v)
}

// RenderStatus renders a page with a status. The page is rendered to
// memory first, so a template error answers 500 rather than half a page.
func (s *Site) RenderStatus(w http.ResponseWriter, status int, page string, v View) {
	var buf bytes.Buffer
	t, ok := s.templates(zoneOf(v.Zone))[page]
	if !ok {
		panic("web: no template " + page)
	}
	v.Base, v.Area = s.cfg.Base, s.cfg.Name
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		panic(fmt.Sprintf("web: render %s: %v", page, err)) // the API's recovery answers 500
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away; nothing left to tell it
}

// flash is the notice a redirect asked for: one of the fixed texts, with
// ?n= filled in where the text counts something.
func (s *Site) flash(q url.Values) string {
	text := s.cfg.Flashes[q.Get("done")]
	if strings.Contains(text, "%d") {
		n, err := strconv.Atoi(q.Get("n"))
		if err != nil || n < 0 {
			return ""
		}
		return fmt.Sprintf(text, n)
	}
	return text
}

// Asset serves the embedded stylesheet, icon and script ({file} of the route),
// cacheable for a day.
func (s *Site) Asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := assetFiles.ReadFile("assets/" + name)
	if err != nil || strings.Contains(name, "/") {
		s.NoPage(w, r)
		return
	}
	types := map[string]string{".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".js": "text/javascript; charset=utf-8"}
	w.Header().Set("Content-Type", types[path.Ext(name)])
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(b)
}
