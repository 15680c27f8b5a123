package dashboard

import (
	"cmp"
	"context"
	"math"
	"net/http"
	"slices"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dashboard/chart"
	"github.com/tally-hq/tally/internal/money"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/web"
)

// amount is a sum in one currency.
type amount struct {
	Cents    int64
	Currency string
}

type overviewData struct {
	Today                  string
	Clicks, HighRiskClicks int64
	Conversions            int64
	Pending                int64
	Revenue, Payout        []amount
	ClickChart, Chart      chart.Chart
	MoneyCharts            []chart.Chart // revenue, then payout, of each currency
	Applications           int
	ApplicationsMore       bool
	Recent                 []conversionRow
	TopPartners            []partnerNumbers // by revenue over the last 30 days
	TopFrom                string
}

// overview shows today's numbers and the last 30 days, days of the
// brand's zone.
func (d *Dashboard) overview(w http.ResponseWriter, r *request) error {
	ctx := r.Context()
	today, zone := r.Today(d.svc.Now()), r.Zone().String()
	now, err := d.svc.Reports.Report(ctx, r.Subject, reports.ReportQuery{From: today, To: today, Timezone: zone})
	if err != nil {
		return err
	}
	data := overviewData{Today: today}
	for _, row := range now.Data {
		data.Clicks += row.Clicks
		data.HighRiskClicks += row.HighRiskClicks
		data.Conversions += row.Conversions
		data.Pending += row.Pending
		data.Revenue = append(data.Revenue, amount{row.RevenueCents, row.Currency})
		data.Payout = append(data.Payout, amount{row.PayoutCents, row.Currency})
	}
	month, err := d.svc.Reports.Report(ctx, r.Subject, reports.ReportQuery{To: today, Timezone: zone, GroupBy: []string{"day"}})
	if err != nil {
		return err
	}
	data.ClickChart, data.Chart, data.MoneyCharts = dayCharts(month)
	if data.TopPartners, data.TopFrom, err = d.topPartners(r, today); err != nil {
		return err
	}
	applied, more, err := d.svc.Partners.Partners(ctx, r.Subject, tally.PartnerApplied, records.ListParams{Limit: 20})
	if err != nil {
		return err
	}
	data.Applications, data.ApplicationsMore = len(applied), more != ""
	recent, _, err := d.svc.Conversions.Conversions(ctx, r.Subject, conversions.ConversionFilter{}, records.ListParams{Limit: 5})
	if err != nil {
		return err
	}
	if data.Recent, err = d.conversionRows(r, recent); err != nil {
		return err
	}
	d.site.Render(w, "overview", r.View("Overview", "overview", data))
	return nil
}

// dayCharts draws clicks and conversions per day, and the revenue and
// payout per day of each currency that earned any, the one with the most
// revenue first: amounts in two currencies do not add up.
func dayCharts(rep reports.Report) (clicks, conversions chart.Chart, moneyCharts []chart.Chart) {
	per := countsBy{}
	amounts := map[string]map[string][2]int64{} // currency → day → revenue, payout
	totals := map[string]int64{}
	for _, row := range rep.Data {
		per.add(row.Day, row)
		if amounts[row.Currency] == nil {
			amounts[row.Currency] = map[string][2]int64{}
		}
		m := amounts[row.Currency][row.Day]
		amounts[row.Currency][row.Day] = [2]int64{m[0] + row.RevenueCents, m[1] + row.PayoutCents}
		totals[row.Currency] += row.RevenueCents
	}
	order := days(rep.From, rep.To)
	clicks, conversions = countCharts("day", order, per)
	var currencies []string
	for c := range amounts {
		currencies = append(currencies, c)
	}
	slices.SortFunc(currencies, func(a, b string) int {
		return cmp.Or(cmp.Compare(totals[b], totals[a]), cmp.Compare(a, b))
	})
	var charts []chart.Chart
	for _, currency := range currencies {
		var rp, pp []chart.Point
		for _, day := range order {
			m := amounts[currency][day]
			rp = append(rp, chart.Point{Label: day[5:], Value: float64(m[0]), Tip: day + ": " + web.Money(m[0], currency) + " revenue"})
			pp = append(pp, chart.Point{Label: day[5:], Value: float64(m[1]), Tip: day + ": " + web.Money(m[1], currency) + " payout"})
		}
		unit := math.Pow10(money.Exponent(currency))
		in := func(v float64) string { return chart.Compact(v / unit) }
		charts = append(charts, chart.New("Revenue per day ("+currency+")", rp, in), chart.New("Payout per day ("+currency+")", pp, in))
	}
	return clicks, conversions, charts
}

type partnersData struct {
	Partners []tally.Partner
	Status   string
	Statuses []string
	ApplyURL string
	Page     web.Page
	Period   web.Period
	Numbers  map[string][]reportRow // by partner id, over Period
}

func (d *Dashboard) partners(w http.ResponseWriter, r *request) error {
	status := r.URL.Query().Get("status")
	partners, next, err := d.svc.Partners.Partners(r.Context(), r.Subject, status, records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		return err
	}
	numbers, p, err := d.numbersBy(r, "partner", "/dashboard/partners")
	if err != nil {
		return err
	}
	d.site.RenderStatus(w, p.Status(), "partners", r.View("Partners", "partners", partnersData{
		Partners: partners, Status: status, Page: web.PageOf(r, next), ApplyURL: web.PublicBase(r.Request) + "/apply/" + r.Subject,
		Statuses: []string{tally.PartnerApplied, tally.PartnerActive, tally.PartnerRejected, tally.PartnerBanned},
		Period:   p, Numbers: numbers,
	}))
	return nil
}

func (d *Dashboard) partnerAction(w http.ResponseWriter, r *request) error {
	do := map[string]func(ctx context.Context, brandID, id string) (tally.Partner, error){
		"approve": d.svc.Partners.ApprovePartner, "reject": d.svc.Partners.RejectPartner, "ban": d.svc.Partners.BanPartner,
		"reactivate": d.svc.Partners.ReactivatePartner,
	}[r.PathValue("action")]
	if do == nil {
		return tally.Errorf(tally.ECodeNotFound, "No such action.")
	}
	switch r.PathValue("action") {
	case "reject", "ban":
		p, err := d.svc.Partners.Partner(r.Context(), r.Subject, r.PathValue("id"))
		if err != nil {
			return err
		}
		c := web.Confirmation{Active: "partners", Heading: "Reject the application of " + p.Name + "?",
			Message: "They cannot apply again with this e-mail address. You can reactivate them later from their page.",
			Button:  "Reject the application", Cancel: "/dashboard/partners/" + p.ID}
		if r.PathValue("action") == "ban" {
			c.Heading, c.Button = "Ban "+p.Name+"?", "Ban the partner"
			c.Message = "Their tracking links stop recording clicks and their conversions are refused from now on, until you reactivate them from their page."
		}
		if !web.Confirmed(w, r, c) {
			return nil
		}
	}
	p, err := do(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	done := map[string]string{"approve": "partner-approved", "reject": "partner-rejected", "ban": "partner-banned", "reactivate": "partner-reactivated"}[r.PathValue("action")]
	return web.Redirect(w, r, web.BackTo(r, "/dashboard/partners/"+p.ID), done)
}

// conversionRow is a conversion with its offer's and partner's names.
type conversionRow struct {
	tally.Conversion
	OfferName, PartnerName string
}

// conversionRows names the offers and partners of conversions.
func (d *Dashboard) conversionRows(r *request, cs []tally.Conversion) ([]conversionRow, error) {
	dir, err := d.directory(r)
	if err != nil {
		return nil, err
	}
	return namedRows(cs, dir.names), nil
}

func namedRows(cs []tally.Conversion, names map[string]string) []conversionRow {
	rows := make([]conversionRow, len(cs))
	for i, c := range cs {
		rows[i] = conversionRow{Conversion: c, OfferName: names[c.OfferID], PartnerName: names[c.PartnerID]}
	}
	return rows
}

// directory is the brand's newest offers and partners (100 of each), to
// name them in lists and offer them in filters; older ones show by id.
type directory struct {
	names    map[string]string // offer and partner ids to names
	offers   []tally.Offer
	partners []tally.Partner
}

func (d *Dashboard) directory(r *request) (directory, error) {
	dir := directory{names: map[string]string{}}
	var err error
	if dir.offers, _, err = d.svc.Offers.Offers(r.Context(), r.Subject, records.ListParams{Limit: records.MaxLimit}); err != nil {
		return dir, err
	}
	for _, o := range dir.offers {
		dir.names[o.ID] = o.Name
	}
	if dir.partners, _, err = d.svc.Partners.Partners(r.Context(), r.Subject, "", records.ListParams{Limit: records.MaxLimit}); err != nil {
		return dir, err
	}
	for _, p := range dir.partners {
		dir.names[p.ID] = p.Name
	}
	return dir, nil
}

// partnersByID returns the brand's partners with ids, by id: the
// directory's, and a read of each one beyond it; one that no longer exists
// has only its id.
func (d *Dashboard) partnersByID(r *request, ids []string) (map[string]tally.Partner, error) {
	dir, err := d.directory(r)
	if err != nil {
		return nil, err
	}
	return d.withPartners(r, dir, ids)
}

// withPartners is partnersByID over a directory already read.
func (d *Dashboard) withPartners(r *request, dir directory, ids []string) (map[string]tally.Partner, error) {
	byID := map[string]tally.Partner{}
	for _, p := range dir.partners {
		byID[p.ID] = p
	}
	for _, id := range ids {
		if _, ok := byID[id]; ok {
			continue
		}
		p, err := d.svc.Partners.Partner(r.Context(), r.Subject, id)
		if err != nil && !web.IsCode(err, tally.ECodeNotFound) {
			return nil, err
		}
		p.ID = id
		byID[id] = p
	}
	return byID, nil
}

// offerPicker and partnerPicker offer the directory's offers and partners,
// and the current value even when it is not among them.
func (dir directory) offerPicker(current string) web.Picker {
	p := web.Picker{Name: "offerId", Label: "Offer"}
	for _, o := range dir.offers {
		p.Choices = append(p.Choices, web.Choice{Value: o.ID, Label: o.Name, Selected: o.ID == current})
	}
	return p.WithCurrent(current)
}

func (dir directory) partnerPicker(current string) web.Picker {
	p := web.Picker{Name: "partnerId", Label: "Partner"}
	for _, pr := range dir.partners {
		p.Choices = append(p.Choices, web.Choice{Value: pr.ID, Label: pr.Name, Selected: pr.ID == current})
	}
	return p.WithCurrent(current)
}

type conversionsData struct {
	Rows     []conversionRow
	Filter   conversions.ConversionFilter
	Offers   web.Picker
	Partners web.Picker
	Statuses []string
	Page     web.Page
	Back     string
	// A filter the list refused, and the field it is about.
	Error, ErrorField string
	Presets           []web.Preset
}

func (d *Dashboard) conversions(w http.ResponseWriter, r *request) error {
	q := r.URL.Query()
	f := conversions.ConversionFilter{Status: q.Get("status"), OfferID: q.Get("offerId"), PartnerID: q.Get("partnerId"), From: q.Get("from"), To: q.Get("to")}
	dir, err := d.directory(r)
	if err != nil {
		return err
	}
	data := conversionsData{Filter: f, Offers: dir.offerPicker(f.OfferID), Partners: dir.partnerPicker(f.PartnerID), Back: r.URL.RequestURI(), Presets: web.Presets(r.URL.Query(), "/dashboard/conversions", d.svc.Now().In(r.Zone())),
		Statuses: []string{tally.ConversionPending, tally.ConversionApproved, tally.ConversionRejected, tally.ConversionReversed}}
	within := f // the dates are the brand's days
	within.From, within.To = web.DayBounds(f.From, f.To, r.Zone())
	cs, next, err := d.svc.Conversions.Conversions(r.Context(), r.Subject, within, records.ListParams{Cursor: q.Get("cursor")})
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.ErrorField = web.FieldOf(err, "status", "offerId", "partnerId", "from", "to")
		data.Error = filterMessage(err, data.ErrorField)
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "conversions", r.View("Conversions", "conversions", data))
		return nil
	}
	data.Rows, data.Page = namedRows(cs, dir.names), web.PageOf(r, next)
	d.site.Render(w, "conversions", r.View("Conversions", "conversions", data))
	return nil
}

func (d *Dashboard) conversion(w http.ResponseWriter, r *request) error {
	c, err := d.svc.Conversions.Conversion(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	rows, err := d.conversionRows(r, []tally.Conversion{c})
	if err != nil {
		return err
	}
	d.site.Render(w, "conversion", r.View("Conversion", "conversions", rows[0]))
	return nil
}

func (d *Dashboard) conversionAction(w http.ResponseWriter, r *request) error {
	do := map[string]func(ctx context.Context, brandID, id string) (tally.Conversion, error){
		"approve": d.svc.Conversions.ApproveConversion, "reject": d.svc.Conversions.RejectConversion,
	}[r.PathValue("action")]
	if do == nil {
		return tally.Errorf(tally.ECodeNotFound, "No such action.")
	}
	if r.PathValue("action") == "reject" {
		c, err := d.svc.Conversions.Conversion(r.Context(), r.Subject, r.PathValue("id"))
		if err != nil {
			return err
		}
		if !web.Confirmed(w, r, web.Confirmation{Active: "conversions", Heading: "Reject this conversion of " + web.Money(c.RevenueCents, c.Currency) + "?",
			Message: "The partner is not paid its payout of " + web.Money(c.PayoutCents, c.Currency) + ", and the rejection cannot be undone.",
			Button:  "Reject the conversion", Cancel: "/dashboard/conversions/" + c.ID}) {
			return nil
		}
	}
	c, err := do(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	return web.Redirect(w, r, web.BackTo(r, "/dashboard/conversions/"+c.ID), "conversion-"+c.Status)
}
