package web

import (
	"net/http"
	"net/url"
	"slices"
	"time"
)

// Picker is a filter's select (the template "picker"): offers or partners
// by name, say.
type Picker struct {
	Name, Label string
	Choices     []Choice
}

// Choice is one option of a Picker.
type Choice struct {
	Value, Label string
	Selected     bool
}

// WithCurrent adds current to the choices, selected, when it is not among
// them (an id from a link, older than the choices).
func (p Picker) WithCurrent(current string) Picker {
	if current == "" {
		return p
	}
	for _, c := range p.Choices {
		if c.Selected {
			return p
		}
	}
	p.Choices = append(p.Choices, Choice{Value: current, Label: current, Selected: true})
	return p
}

// Period is the range of days a list's numbers cover, from the page's from
// and to (the last 30 days when both are empty), as the report resolved it.
type Period struct {
	Path       string // the page, for the form and its links
	From, To   string
	Error      string
	ErrorField string
	Keep       url.Values // the page's other filters, kept by the form and links
	Presets    []Preset
}

// Status is the page's: 422 when the dates are wrong.
func (p Period) Status() int {
	if p.Error != "" {
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

// Preset is a link to a page over a common range of days.
type Preset struct {
	Label, Href string
	Current     bool // the page shows this range now
}

// Presets links path over today, the last 7 days, this month and last
// month, days of now's zone (the account's), keeping the page's other
// filters in q: plain links, which need no JavaScript.
func Presets(q url.Values, path string, now time.Time) []Preset {
	today := now.Format(time.DateOnly)
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, now.Location())
	var out []Preset
	for _, p := range []struct{ label, from, to string }{
		{"Today", today, today},
		{"7 days", now.AddDate(0, 0, -6).Format(time.DateOnly), today},
		{"This month", first.Format(time.DateOnly), today},
		{"Last month", first.AddDate(0, -1, 0).Format(time.DateOnly), first.AddDate(0, 0, -1).Format(time.DateOnly)},
	} {
		link := Filters(q)
		link.Set("from", p.from)
		link.Set("to", p.to)
		out = append(out, Preset{Label: p.label, Href: path + "?" + link.Encode(), Current: q.Get("from") == p.from && q.Get("to") == p.to})
	}
	return out
}

// Filters is a page's query without its paging and notice (cursor, back,
// done, n) nor the keys in drop: what a link or form to the same list with
// other dates keeps.
func Filters(q url.Values, drop ...string) url.Values {
	out := url.Values{}
	for k, v := range q {
		if !slices.Contains(drop, k) && !slices.Contains([]string{"cursor", "back", "done", "n"}, k) {
			out[k] = v
		}
	}
	return out
}

// DayBounds are a list filter's from and to dates (YYYY-MM-DD, of the
// account's zone) as the moments they stand for: the first millisecond of
// from and the last of to, in RFC 3339. A value that is no date is kept
// as it is, for the list to refuse in its own words.
func DayBounds(from, to string, zone *time.Location) (string, string) {
	bound := func(date string, days int, shift time.Duration) string {
		d, err := time.Parse(time.DateOnly, date)
		if err != nil {
			return date
		}
		return time.Date(d.Year(), d.Month(), d.Day()+days, 0, 0, 0, 0, zone).Add(shift).UTC().Format("2006-01-02T15:04:05.000Z07:00")
	}
	return bound(from, 0, 0), bound(to, 1, -time.Millisecond)
}
