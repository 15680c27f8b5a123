package dashboard

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/dashboard/chart"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/web"
)

// zones are offered in the time zone field (and the zone a link asked
// for, when it is another).
var zones = []string{
	"UTC", "America/Los_Angeles", "America/Denver", "America/Chicago", "America/New_York", "America/Sao_Paulo",
	"Europe/London", "Europe/Paris", "Europe/Berlin", "Europe/Madrid", "Europe/Istanbul", "Africa/Lagos",
	"Africa/Johannesburg", "Asia/Dubai", "Asia/Kolkata", "Asia/Kathmandu", "Asia/Singapore", "Asia/Shanghai",
	"Asia/Tokyo", "Australia/Sydney", "Pacific/Auckland",
}

type reportRow struct {
	tally.ReportRow
	OfferName, PartnerName string
}

// Rate is the conversion rate: conversions per 100 clicks, "—" without
// clicks.
func (r reportRow) Rate() string {
	if r.Clicks == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(r.Conversions)/float64(r.Clicks))
}

// EPC is the revenue per click, "—" without clicks.
func (r reportRow) EPC() string {
	if r.Clicks == 0 {
		return "—"
	}
	return web.MoneyIn((r.RevenueCents+r.Clicks/2)/r.Clicks, r.Currency)
}

// totals sums rows per currency, in the order the currencies first come.
func totals(rows []reportRow) []reportRow {
	var out []reportRow
	at := map[string]int{}
	for _, r := range rows {
		i, ok := at[r.Currency]
		if !ok {
			i, at[r.Currency] = len(out), len(out)
			out = append(out, reportRow{ReportRow: tally.ReportRow{Currency: r.Currency}})
		}
		t := &out[i].ReportRow
		t.Clicks += r.Clicks
		t.HighRiskClicks += r.HighRiskClicks
		t.Conversions += r.Conversions
		t.Pending += r.Pending
		t.Approved += r.Approved
		t.Rejected += r.Rejected
		t.RevenueCents += r.RevenueCents
		t.PayoutCents += r.PayoutCents
		t.ProfitCents += r.ProfitCents
	}
	return out
}

type reportsData struct {
	Query      reportForm
	Report     reports.Report
	Rows       []reportRow
	Totals     []reportRow // per currency
	Groups     []string    // the rows' grouping columns: Day, Offer, …
	ClickChart chart.Chart
	Chart      chart.Chart
	Zones      []string
	CSV        string
	Error      string
	ErrorField string
	Presets    []web.Preset
}

// reportForm is what the report form asks for.
type reportForm struct {
	From, To, Timezone, Time string
	Offer, Partner           bool
}

// readReportForm reads the form; its zone is the brand's, zone, unless it
// asks for another.
func readReportForm(q url.Values, zone string) (reportForm, reports.ReportQuery) {
	f := reportForm{From: q.Get("from"), To: q.Get("to"), Timezone: cmp.Or(q.Get("timezone"), zone), Time: q.Get("time"),
		Offer: q.Get("offer") == "1", Partner: q.Get("partner") == "1"}
	if len(q) == 0 { // the page as first opened: the last 30 days, by day
		f.Time = "day"
	}
	rq := reports.ReportQuery{From: f.From, To: f.To, Timezone: f.Timezone, GroupBy: []string{}}
	if f.Time == "day" || f.Time == "week" || f.Time == "month" {
		rq.GroupBy = append(rq.GroupBy, f.Time)
	}
	if f.Offer {
		rq.GroupBy = append(rq.GroupBy, "offer")
	}
	if f.Partner {
		rq.GroupBy = append(rq.GroupBy, "partner")
	}
	return f, rq
}

func (d *Dashboard) reports(w http.ResponseWriter, r *request) error {
	form, rq := readReportForm(r.URL.Query(), r.Zone().String())
	kept := r.URL.Query()
	if !kept.Has("time") { // the page as first opened is by day: so are its presets
		kept.Set("time", form.Time)
	}
	data := reportsData{Query: form, Zones: zones, Presets: web.Presets(kept, "/dashboard/reports", d.svc.Now().In(r.Zone()))}
	if form.Timezone != "" && !slices.Contains(zones, form.Timezone) {
		data.Zones = append([]string{form.Timezone}, zones...)
	}
	rep, err := d.svc.Reports.Report(r.Context(), r.Subject, rq)
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.ErrorField = web.FieldOf(err, "from", "to", "timezone", "groupBy")
		data.Error = filterMessage(err, data.ErrorField)
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "reports", r.View("Reports", "reports", data))
		return nil
	}
	data.Report = rep
	dir, err := d.directory(r)
	if err != nil {
		return err
	}
	for _, row := range rep.Data {
		data.Rows = append(data.Rows, reportRow{ReportRow: row, OfferName: dir.names[row.OfferID], PartnerName: dir.names[row.PartnerID]})
	}
	data.Totals = totals(data.Rows)
	for _, g := range rq.GroupBy {
		data.Groups = append(data.Groups, strings.ToUpper(g[:1])+g[1:])
	}
	data.ClickChart, data.Chart = reportCharts(rep, form.Time)
	data.Query.From, data.Query.To, data.Query.Timezone = rep.From, rep.To, rep.Timezone
	q := r.URL.Query()
	for k, v := range map[string]string{"from": rep.From, "to": rep.To, "timezone": rep.Timezone, "time": form.Time} {
		q.Set(k, v)
	}
	data.CSV = "/dashboard/reports.csv?" + q.Encode()
	d.site.Render(w, "reports", r.View("Reports", "reports", data))
	return nil
}

// reportCharts draws clicks and conversions per time row, summed over
// offers, partners and currencies; nothing when the report is not by time.
func reportCharts(rep reports.Report, by string) (clicks, conversions chart.Chart) {
	if by != "day" && by != "week" && by != "month" {
		return chart.Chart{}, chart.Chart{}
	}
	var order []string
	per := countsBy{}
	for _, row := range rep.Data {
		k := row.Day + row.Week + row.Month
		if per[k] == nil {
			order = append(order, k)
		}
		per.add(k, row)
	}
	if by == "day" { // every day, those without any too
		order = days(rep.From, rep.To)
	}
	return countCharts(by, order, per)
}

// counts are the clicks and conversions of one bar.
type counts struct{ clicks, highRisk, conversions int64 }

type countsBy map[string]*counts

func (m countsBy) add(k string, row tally.ReportRow) {
	c := m[k]
	if c == nil {
		c = &counts{}
		m[k] = c
	}
	c.clicks += row.Clicks
	c.highRisk += row.HighRiskClicks
	c.conversions += row.Conversions
}

// countCharts draws clicks (the high-risk ones marked) and conversions per
// day, week or month, a bar for each of order.
func countCharts(by string, order []string, per countsBy) (clicks, conversions chart.Chart) {
	var kp, cp []chart.Point
	for _, k := range order {
		label := k
		if by == "day" {
			label = k[5:] // MM-DD; the range above the chart gives the year
		}
		c := per[k]
		if c == nil {
			c = &counts{}
		}
		kp = append(kp, chart.Point{Label: label, Value: float64(c.clicks), Part: float64(c.highRisk),
			Tip: fmt.Sprintf("%s: %s clicks, %s high-risk", k, web.Number(c.clicks), web.Number(c.highRisk))})
		cp = append(cp, chart.Point{Label: label, Value: float64(c.conversions), Tip: fmt.Sprintf("%s: %s conversions", k, web.Number(c.conversions))})
	}
	count := chart.Compact
	clicks = chart.New("Clicks per "+by, kp, count)
	clicks.PartLabel = "high-risk"
	return clicks, chart.New("Conversions per "+by, cp, count)
}

// reportCSV is the report's CSV download, the same as the API's.
func (d *Dashboard) reportCSV(w http.ResponseWriter, r *request) error {
	_, rq := readReportForm(r.URL.Query(), r.Zone().String())
	rep, err := d.svc.Reports.Report(r.Context(), r.Subject, rq)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, httpapi.ReportFilename(rep)))
	_ = rep.WriteCSV(w) // the client went away; nothing left to tell it
	return nil
}
