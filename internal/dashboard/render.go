package dashboard

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/money"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// navItem is one entry of the navigation; Section groups Activity pages.
type navItem struct {
	Key, Label, Href, Section string
}

// nav is the dashboard's navigation, in order. Settings is one entry whose
// pages share a row of tabs (settingsTabs).
var nav = []navItem{
	{"overview", "Overview", "/dashboard", ""},
	{"offers", "Offers", "/dashboard/offers", ""},
	{"partners", "Partners", "/dashboard/partners", ""},
	{"conversions", "Conversions", "/dashboard/conversions", ""},
	{"clicks", "Clicks", "/dashboard/clicks", ""},
	{"reports", "Reports", "/dashboard/reports", ""},
	{"payouts", "Payouts", "/dashboard/payouts", ""},
	{"webhooks", "Webhooks", "/dashboard/webhooks", ""},
	{"deliveries", "Delivery log", "/dashboard/activity/deliveries", "Activity"},
	{"settings", "Settings", "/dashboard/settings/keys", ""},
}

// settingsTabs are the Settings pages, in order.
var settingsTabs = []navItem{
	{"keys", "API keys", "/dashboard/settings/keys", "Settings"},
	{"fraud", "Fraud", "/dashboard/settings/fraud", "Settings"},
	{"postback-token", "Postback token", "/dashboard/settings/postback-token", "Settings"},
}

// view is what every template gets.
type view struct {
	Title     string
	Active    string // the nav item's key
	BrandName string
	BrandID   string
	Email     string
	CSRF      string
	Nav       []navItem
	Flash     string // a notice after a redirect
	Tabs      []navItem
	Tab       string // the current tab's key
	Data      any
}

// view fills in the signed-in parts.
func (r *request) view(title, active string, data any) view {
	return view{
		Title: title, Active: active, BrandName: r.sess.BrandName, BrandID: r.sess.BrandID, Email: r.sess.Email,
		CSRF: csrfToken(r.token), Nav: nav, Flash: flash(r.URL.Query()), Data: data,
	}
}

// settingsView is the view of the Settings page whose tab is tab.
func (r *request) settingsView(title, tab string, data any) view {
	v := r.view(title, "settings", data)
	v.Tabs, v.Tab = settingsTabs, tab
	return v
}

// flash is the notice a redirect asked for: one of the fixed texts, with
// ?n= filled in where the text counts something.
func flash(q url.Values) string {
	text := flashes[q.Get("done")]
	if strings.Contains(text, "%d") {
		n, err := strconv.Atoi(q.Get("n"))
		if err != nil || n < 0 {
			return ""
		}
		return fmt.Sprintf(text, n)
	}
	return text
}

// flashes are the notices a redirect after a change may show (?done=…):
// fixed texts, so a link cannot make the page say anything else.
var flashes = map[string]string{
	"offer-created":           "The offer was created.",
	"partner-approved":        "The partner was approved.",
	"partner-rejected":        "The application was rejected.",
	"partner-banned":          "The partner was banned.",
	"partner-reactivated":     "The partner is active again.",
	"conversion-reversed":     "The conversion was reversed. Its payout left the partner's balance.",
	"payout-created":          "The payout was created. Pay its lines, then mark it paid.",
	"terms-saved":             "The terms were saved. The partner's conversions pay them from now on; those already recorded keep their payout.",
	"terms-removed":           "The terms were removed. The partner earns the offer's payout from its next conversion on.",
	"payout-paid":             "The payout is marked paid.",
	"conversion-approved":     "The conversion was approved.",
	"conversion-rejected":     "The conversion was rejected.",
	"webhook-tested":          "A webhook.test event is on its way; the delivery log shows how it went.",
	"webhook-deleted":         "The webhook was deleted.",
	"delivery-retried":        "The delivery was queued again; it starts over with attempt 1 now.",
	"key-revoked":             "The key was revoked. Requests with it are refused.",
	"offer-updated":           "The offer was saved. Clicks and conversions follow the change at once.",
	"webhook-updated":         "The webhook was saved.",
	"webhook-enabled":         "The webhook is enabled again, with its failure count back at 0. New events are delivered to it.",
	"webhook-recovered":       "Failed deliveries queued again: %d. The delivery log shows how they go.",
	"webhook-recovered-more":  "Failed deliveries queued again: %d, and there are more: recover again with the same date for the rest.",
	"postback-saved":          "The postback was saved.",
	"postback-tested":         "A test postback is on its way, filled with sample values; the delivery log shows how it went.",
	"postback-enabled":        "The postback is enabled again, with its failure count back at 0.",
	"postback-recovered":      "Failed postbacks queued again: %d. The delivery log shows how they go.",
	"postback-recovered-more": "Failed postbacks queued again: %d, and there are more: recover again with the same date for the rest.",
	"postback-deleted":        "The postback was deleted. The partner gets no more postbacks.",
	"fraud-saved":             "The fraud settings were saved. They apply to clicks from now on.",
	"ip-blocked":              "The range was blocked. Its clicks raise blocked_ip from now on.",
	"ip-unblocked":            "The range was removed from the blocklist.",
	"token-deleted":           "The postback token was deleted. GET postbacks are refused until you make another.",
	"signed-out":              "You are signed out.",
}

var (
	pagesOnce sync.Once
	pages     map[string]*template.Template
)

// templates parses every page with the layout once, on first use (so a
// function that never renders a page never pays for it).
func templates() map[string]*template.Template {
	pagesOnce.Do(func() {
		funcs := template.FuncMap{
			"money":    moneyOf,
			"moneyIn":  moneyIn,
			"when":     when,
			"whenPtr":  whenPtr,
			"number":   number,
			"join":     strings.Join,
			"contains": contains,
			"query":    query,
			"inc":      func(i int) int { return i + 1 },
			"list":     func(v ...string) []string { return v },
			"field":    newField,
			"recoverForm": func(action, since, err, status, csrf string) recoverForm {
				return recoverForm{Action: action, Since: since, Error: err, Status: status, CSRF: csrf}
			},
			"seconds":  func(t tally.Time) string { return t.UTC().Format("2006-01-02 15:04:05") + " UTC" },
			"sentence": firstSentence,
		}
		layout := template.Must(template.New("layout").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html"))
		names, err := fs.Glob(templateFiles, "templates/*.html")
		if err != nil {
			panic(err)
		}
		pages = map[string]*template.Template{}
		for _, name := range names {
			page := strings.TrimSuffix(path.Base(name), ".html")
			if page == "layout" {
				continue
			}
			pages[page] = template.Must(template.Must(layout.Clone()).ParseFS(templateFiles, name))
		}
	})
	return pages
}

func render(w http.ResponseWriter, page string, v view) { renderStatus(w, http.StatusOK, page, v) }

// renderStatus renders a page with a status. The page is rendered to memory
// first, so a template error answers 500 rather than half a page.
func renderStatus(w http.ResponseWriter, status int, page string, v view) {
	var buf bytes.Buffer
	t, ok := templates()[page]
	if !ok {
		panic("dashboard: no template " + page)
	}
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		panic(fmt.Sprintf("dashboard: render %s: %v", page, err)) // the API's recovery answers 500
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away; nothing left to tell it
}

// asset serves the embedded stylesheet and icon, cacheable for a day.
func (d *Dashboard) asset(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("file")
	b, err := assetFiles.ReadFile("assets/" + name)
	if err != nil || strings.Contains(name, "/") {
		d.noPage(w, r)
		return
	}
	types := map[string]string{".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}
	w.Header().Set("Content-Type", types[path.Ext(name)])
	w.Header().Set("Cache-Control", "public, max-age=86400")
	_, _ = w.Write(b)
}

// redirect answers a form with a redirect to a page and a notice.
func redirect(w http.ResponseWriter, r *request, to, done string) error {
	if done != "" {
		path, fragment, hasFragment := strings.Cut(to, "#")
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		to = path + sep + "done=" + done
		if hasFragment {
			to += "#" + fragment
		}
	}
	http.Redirect(w, r.Request, to, http.StatusSeeOther)
	return nil
}

// moneyOf writes minor units as an amount: 123456 USD is "1,234.56 USD".
func moneyOf(cents int64, currency string) string { return moneyIn(cents, currency) + " " + currency }

// moneyIn writes minor units as a decimal amount without the currency.
func moneyIn(cents int64, currency string) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	d := money.Exponent(currency)
	unit := int64(1)
	for range d {
		unit *= 10
	}
	s := sign + number(cents/unit)
	if d > 0 {
		s += fmt.Sprintf(".%0*d", d, cents%unit)
	}
	return s
}

// parseMoney reads a decimal amount in major units ("12.50") into minor
// units of the currency.
func parseMoney(s, currency string) (int64, bool) {
	s = strings.ReplaceAll(strings.TrimSpace(s), ",", "")
	whole, frac, _ := strings.Cut(s, ".")
	d := money.Exponent(currency)
	if whole == "" || len(frac) > d || strings.HasPrefix(whole, "-") || strings.HasPrefix(whole, "+") {
		return 0, false
	}
	n, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || n > 1e12 {
		return 0, false
	}
	for range d {
		n *= 10
	}
	if frac != "" {
		f, err := strconv.ParseInt(frac+strings.Repeat("0", d-len(frac)), 10, 64)
		if err != nil || f < 0 {
			return 0, false
		}
		n += f
	}
	return n, true
}

// number writes an integer with thousands separators.
func number(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// when writes a time for people: "2026-11-22 10:04 UTC".
func when(t tally.Time) string { return t.UTC().Format("2006-01-02 15:04") + " UTC" }

func whenPtr(t *tally.Time) string {
	if t == nil {
		return ""
	}
	return when(*t)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// query builds a query string from pairs, leaving out empty values.
func query(pairs ...string) template.URL {
	var b strings.Builder
	for i := 0; i+1 < len(pairs); i += 2 {
		if pairs[i+1] == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(template.URLQueryEscaper(pairs[i]) + "=" + template.URLQueryEscaper(pairs[i+1]))
	}
	return template.URL(b.String())
}

// ago is how long ago t was, roughly, for "last used".
func ago(now time.Time, t *tally.Time) string {
	if t == nil {
		return "never"
	}
	d := now.Sub(t.Time)
	switch {
	case d < 2*time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours ago", int(d.Hours()))
	}
	return fmt.Sprintf("%d days ago", int(d.Hours()/24))
}

// firstSentence shortens a description to its first sentence.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return s
}

// field is one input of a form for the shared input templates ("number"):
// its name, label, value, error and hints.
type field struct {
	Name, Label, Value, Error string
	Min, Max, Hint            string
}

func newField(name, label, value, err string, more ...string) field {
	f := field{Name: name, Label: label, Value: value, Error: err}
	if len(more) == 3 {
		f.Min, f.Max, f.Hint = more[0], more[1], more[2]
	}
	return f
}

// recoverForm is the recover form of an endpoint's page ("recover").
type recoverForm struct {
	Action, Since, Error, Status, CSRF string
}

// labelled rewrites validation messages that start with the API's field
// name to start with the form's label ("destinationUrl must be…" beside the
// field reads "Destination URL must be…").
func labelled(errs map[string]string, labels map[string]string) map[string]string {
	for field, msg := range errs {
		if label, ok := labels[field]; ok {
			if rest, found := strings.CutPrefix(msg, field+" "); found {
				errs[field] = label + " " + rest
			}
		}
	}
	return errs
}
