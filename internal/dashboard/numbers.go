package dashboard

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/reports"
)

// period is the range of days a list's numbers cover, from the page's from
// and to (the last 30 days when both are empty), as the report resolved it.
type period struct {
	Path       string // the page, for the form and its links
	From, To   string
	Error      string
	ErrorField string
	Keep       url.Values // the page's other filters, kept by the form and links
	Presets    []preset
}

// status is the page's: 422 when the dates are wrong.
func (p period) status() int {
	if p.Error != "" {
		return http.StatusUnprocessableEntity
	}
	return http.StatusOK
}

// numbersBy sums the brand's report rollups over the period asked for in
// the query, per offer or per partner (group), in rows per currency (an
// offer has one; a partner may earn in several). A mistake in the dates
// leaves the numbers out and says so in p.Error.
func (d *Dashboard) numbersBy(r *request, group, path string) (map[string][]reportRow, period, error) {
	q := r.URL.Query()
	p := period{Path: path, From: q.Get("from"), To: q.Get("to"), Keep: url.Values{}, Presets: presetsFor(q, path, d.svc.Now())}
	for k, v := range q {
		if k != "from" && k != "to" && k != "cursor" && k != "done" {
			p.Keep[k] = v
		}
	}
	rep, err := d.svc.Reports.Report(r.Context(), r.brandID(), reports.ReportQuery{From: p.From, To: p.To, GroupBy: []string{group}})
	if err != nil {
		if !isCode(err, tally.ECodeValidation) {
			return nil, p, err
		}
		p.ErrorField = fieldOf(err, "from", "to")
		p.Error = filterMessage(err, p.ErrorField)
		return nil, p, nil
	}
	p.From, p.To = rep.From, rep.To
	out := map[string][]reportRow{}
	for _, row := range rep.Data {
		id := cmp.Or(row.OfferID, row.PartnerID)
		out[id] = append(out[id], reportRow{ReportRow: row})
	}
	return out, p, nil
}

// topPartners are the five partners that brought the most revenue in the
// 30 days ending today, and the first of those days.
func (d *Dashboard) topPartners(r *request, today string) ([]partnerNumbers, string, error) {
	rep, err := d.svc.Reports.Report(r.Context(), r.brandID(), reports.ReportQuery{To: today, GroupBy: []string{"partner"}})
	if err != nil {
		return nil, "", err
	}
	by := map[string][]reportRow{}
	for _, row := range rep.Data {
		by[row.PartnerID] = append(by[row.PartnerID], reportRow{ReportRow: row})
	}
	top := rankPartners(by, 5)
	for i := range top {
		p, err := d.svc.Partners.Partner(r.Context(), r.brandID(), top[i].ID)
		if err != nil && !isCode(err, tally.ECodeNotFound) {
			return nil, "", err
		}
		top[i].Name = cmp.Or(p.Name, top[i].ID)
	}
	return top, rep.From, nil
}

// rankPartners are the partners with the most revenue in the report's rows
// (grouped by partner), at most n, each with its rows per currency. Revenue
// in different currencies is compared as written: the order is a guide,
// and each amount shows its currency.
func rankPartners(by map[string][]reportRow, n int) []partnerNumbers {
	var out []partnerNumbers
	for id, rows := range by {
		out = append(out, partnerNumbers{ID: id, Rows: rows})
	}
	revenue := func(p partnerNumbers) (sum int64) {
		for _, r := range p.Rows {
			sum += r.RevenueCents
		}
		return sum
	}
	conversions := func(p partnerNumbers) (sum int64) {
		for _, r := range p.Rows {
			sum += r.Conversions
		}
		return sum
	}
	slices.SortFunc(out, func(a, b partnerNumbers) int {
		return cmp.Or(cmp.Compare(revenue(b), revenue(a)), cmp.Compare(conversions(b), conversions(a)), cmp.Compare(a.ID, b.ID))
	})
	return out[:min(n, len(out))]
}

// partnerNumbers is a partner's line among the top partners.
type partnerNumbers struct {
	ID, Name string
	Rows     []reportRow
}

// preset is a link to a page over a common range of days.
type preset struct {
	Label, Href string
	Current     bool // the page shows this range now
}

// presetsFor links path over today, the last 7 days, this month and last
// month (UTC days, as the lists' dates are), keeping the page's other
// filters in q: plain links, which need no JavaScript.
func presetsFor(q url.Values, path string, now time.Time) []preset {
	now = now.UTC()
	today := now.Format(time.DateOnly)
	first := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	var out []preset
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
		out = append(out, preset{Label: p.label, Href: path + "?" + link.Encode(), Current: q.Get("from") == p.from && q.Get("to") == p.to})
	}
	return out
}
