package web

import (
	"net/http"
	"net/url"
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
// month (UTC days, as the lists' dates are), keeping the page's other
// filters in q: plain links, which need no JavaScript.
func Presets(q url.Values, path string, now time.Time) []Preset {
	now = now.UTC()
	today := now.Format(time.DateOnly)
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	var out []Preset
	for _, p := range []struct{ label, from, to string }{
		{"Today", today, today},
		{"7 days", now.AddDate(0, 0, -6).Format(time.DateOnly), today},
		{"This month", first.Format(time.DateOnly), today},
		{"Last month", first.AddDate(0, -1, 0).Format(time.DateOnly), first.AddDate(0, 0, -1).Format(time.DateOnly)},
	} {
		link := url.Values{}
		for k, v := range q {
			if k != "cursor" && k != "done" {
				link[k] = v
			}
		}
		link.Set("from", p.from)
		link.Set("to", p.to)
		out = append(out, Preset{Label: p.label, Href: path + "?" + link.Encode(), Current: q.Get("from") == p.from && q.Get("to") == p.to})
	}
	return out
}
