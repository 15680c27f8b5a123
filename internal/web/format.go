package web

import (
	"errors"
	"fmt"
	"html/template"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/money"
)

// Money writes minor units as an amount: 123456 USD is "1,234.56 USD".
func Money(cents int64, currency string) string { return MoneyIn(cents, currency) + " " + currency }

// MoneyIn writes minor units as a decimal amount without the currency.
func MoneyIn(cents int64, currency string) string {
	sign := ""
	if cents < 0 {
		sign, cents = "-", -cents
	}
	d := money.Exponent(currency)
	unit := int64(1)
	for range d {
		unit *= 10
	}
	s := sign + Number(cents/unit)
	if d > 0 {
		s += fmt.Sprintf(".%0*d", d, cents%unit)
	}
	return s
}

// ParseMoney reads a decimal amount in major units ("12.50") into minor
// units of the currency.
func ParseMoney(s, currency string) (int64, bool) {
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

// Number writes an integer with thousands separators.
func Number(n int64) string {
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

// When writes a time for people: "2026-11-22 10:04 UTC".
func When(t tally.Time) string { return WhenIn(t, time.UTC) }

// WhenIn writes a time for people in a zone, which it names:
// "2026-11-23 00:30 NZDT"; "2026-11-22 16:19 +0545" where the zone has no
// abbreviation.
func WhenIn(t tally.Time, zone *time.Location) string {
	return t.In(zone).Format("2006-01-02 15:04 MST")
}

func whenPtr(t *tally.Time, zone *time.Location) string {
	if t == nil {
		return ""
	}
	return WhenIn(*t, zone)
}

// seconds writes a time to the second in a zone.
func seconds(t tally.Time, zone *time.Location) string {
	return t.In(zone).Format("2006-01-02 15:04:05 MST")
}

// Ago is how long ago t was, roughly, for "last used".
func Ago(now time.Time, t *tally.Time) string {
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

// Query builds a query string from pairs, leaving out empty values.
func Query(pairs ...string) template.URL {
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

// FirstSentence shortens a description to its first sentence.
func FirstSentence(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		return s[:i+1]
	}
	return s
}

// Field is one input of a form for the shared input templates ("number"):
// its name, label, value, error and hints.
type Field struct {
	Name, Label, Value, Error string
	Min, Max, Hint            string
}

// NewField is a Field; more is its Min, Max and Hint, all three or none
// (the template function "field").
func NewField(name, label, value, err string, more ...string) Field {
	f := Field{Name: name, Label: label, Value: value, Error: err}
	if len(more) == 3 {
		f.Min, f.Max, f.Hint = more[0], more[1], more[2]
	}
	return f
}

// Labelled rewrites validation messages that start with the API's field
// name to start with the form's label ("destinationUrl must be…" beside the
// field reads "Destination URL must be…").
func Labelled(errs map[string]string, labels map[string]string) map[string]string {
	for field, msg := range errs {
		if label, ok := labels[field]; ok {
			if rest, found := strings.CutPrefix(msg, field+" "); found {
				errs[field] = label + " " + rest
			}
		}
	}
	return errs
}

// FieldOf is the field a validation error is about: its own, or the first
// of fields its message starts with, or "".
func FieldOf(err error, fields ...string) string {
	if f := tally.ErrorField(err); f != "" {
		return f
	}
	msg := tally.ErrorMessage(err)
	for _, f := range fields {
		if strings.HasPrefix(msg, f+" ") || strings.HasPrefix(msg, f+":") || strings.HasPrefix(msg, f+"[") {
			return f
		}
	}
	return ""
}

// FieldOr is FieldOf, or def when the error names none of fields.
func FieldOr(err error, def string, fields ...string) string {
	if f := FieldOf(err, fields...); f != "" {
		return f
	}
	return def
}

// IsCode reports whether err is a user-facing error with one of codes.
func IsCode(err error, codes ...string) bool {
	var e *tally.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// Page is a list page's paging: links to the older page and back to the
// newer one, each with the page's filters; the template "pager" shows
// them. The store's cursors only go forward, so a page's address carries
// the trail of cursors that opened the pages before it (?back=, oldest
// first, the newest page's empty cursor left out): Newer opens the last
// of them, Older adds the page's own cursor to the trail.
type Page struct {
	Older, Newer string // the pages' addresses; "" when there is none
}

// maxTrail bounds the cursors an address carries: from deeper than that,
// Newer goes as far back as the trail reaches and then to the newest page.
const maxTrail = 40

// PageOf is the paging of a list page whose next page starts at cursor
// next ("" on the last page).
func PageOf(r *Request, next string) Page {
	q := r.URL.Query()
	q.Del("done")
	q.Del("n")
	cursor := q.Get("cursor")
	var trail []string
	if b := q.Get("back"); b != "" {
		trail = strings.Split(b, ",")
	}
	at := func(cursor string, trail []string) string {
		q.Del("cursor")
		q.Del("back")
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		if len(trail) > 0 {
			q.Set("back", strings.Join(trail, ","))
		}
		return r.URL.Path + "?" + q.Encode()
	}
	var p Page
	if cursor != "" {
		if len(trail) == 0 {
			p.Newer = at("", nil)
		} else {
			p.Newer = at(trail[len(trail)-1], trail[:len(trail)-1])
		}
	}
	if next != "" {
		older := trail
		if cursor != "" {
			older = append(older[:len(older):len(older)], cursor)
		}
		p.Older = at(next, older[max(0, len(older)-maxTrail):])
	}
	return p
}
