package dashboard

import (
	"cmp"
	"slices"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/web"
)

// numbersBy sums the brand's report rollups over the period asked for in
// the query, per offer or per partner (group), in rows per currency (an
// offer has one; a partner may earn in several). A mistake in the dates
// leaves the numbers out and says so in p.Error.
func (d *Dashboard) numbersBy(r *request, group, path string) (map[string][]reportRow, web.Period, error) {
	q := r.URL.Query()
	p := web.Period{Path: path, From: q.Get("from"), To: q.Get("to"), Keep: web.Filters(q, "from", "to"), Presets: web.Presets(q, path, d.svc.Now().In(r.Zone()))}
	rep, err := d.svc.Reports.Report(r.Context(), r.Subject, reports.ReportQuery{From: p.From, To: p.To, Timezone: r.Zone().String(), GroupBy: []string{group}})
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return nil, p, err
		}
		p.ErrorField = web.FieldOf(err, "from", "to")
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
	rep, err := d.svc.Reports.Report(r.Context(), r.Subject, reports.ReportQuery{To: today, Timezone: r.Zone().String(), GroupBy: []string{"partner"}})
	if err != nil {
		return nil, "", err
	}
	by := map[string][]reportRow{}
	for _, row := range rep.Data {
		by[row.PartnerID] = append(by[row.PartnerID], reportRow{ReportRow: row})
	}
	top := rankPartners(by, 5)
	for i := range top {
		p, err := d.svc.Partners.Partner(r.Context(), r.Subject, top[i].ID)
		if err != nil && !web.IsCode(err, tally.ECodeNotFound) {
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
