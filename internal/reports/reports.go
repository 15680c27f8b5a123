// Package reports serves reports from rollups: counters per day and per
// quarter hour, offer, partner and currency, kept at write time (in the
// record's transaction, or from the table's stream) rather than counted
// from conversions when asked.
package reports

import (
	"cmp"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service serves reports and keeps the rollups of the table's stream.
type Service struct {
	db *records.DB
	// zones loads the IANA time zones that reports bucket days in.
	zones func(name string) (*time.Location, error)
}

// New returns the Service over db, loading time zones with zones
// (time.LoadLocation, or tzdb.LoadLocation where the system has no zone
// database).
func New(db *records.DB, zones func(name string) (*time.Location, error)) *Service {
	return &Service{db: db, zones: zones}
}

// maxReportDays bounds one report's range.
const maxReportDays = 366

// ReportQuery is GET /reports. From and To are dates in Timezone (an IANA
// name; empty is UTC), inclusive; empty To is today there and empty From is
// 29 days before To. GroupBy holds any of day, week, month, offer, partner;
// days, weeks and months are those of Timezone.
type ReportQuery struct {
	From, To  string
	Timezone  string
	OfferID   string
	PartnerID string
	GroupBy   []string
}

// Report is the answer to a ReportQuery, with the range it resolved to.
type Report struct {
	Data     []tally.ReportRow `json:"data"`
	From     string            `json:"from"`
	To       string            `json:"to"`
	Timezone string            `json:"timezone"`
	GroupBy  []string          `json:"groupBy"`
}

var reportGroups = []string{"day", "week", "month", "offer", "partner"}

// Report sums the brand's rollups over the range into rows, one per
// combination of the grouping values and currency (amounts in different
// currencies are never added together). Rows are sorted by their grouping
// values, then currency.
//
// The range is [from 00:00, to+1 00:00) in the time zone. A UTC day wholly
// inside it whose every instant falls in one row (always, in UTC) is read
// from the daily rollups; the other days, cut by a local midnight or a
// local week or month boundary, from the quarter-hour rollups, each quarter
// counted on the local date it starts on.
func (s *Service) Report(ctx context.Context, brandID string, q ReportQuery) (Report, error) {
	loc, err := s.reportZone(q.Timezone)
	if err != nil {
		return Report{}, err
	}
	from, to, err := reportRange(q.From, q.To, s.db.Now().In(loc))
	if err != nil {
		return Report{}, err
	}
	if err := validate.First(validate.IDFilter("offerId", "off_", q.OfferID), validate.IDFilter("partnerId", "prt_", q.PartnerID)); err != nil {
		return Report{}, err
	}
	group := map[string]bool{}
	for _, g := range q.GroupBy {
		if !slices.Contains(reportGroups, g) || group[g] {
			return Report{}, validate.Invalid("groupBy must be a comma-separated list of distinct values from: %s.", strings.Join(reportGroups, ", "))
		}
		group[g] = true
	}
	start, end := localMidnight(from, 0, loc), localMidnight(to, 1, loc)
	// when says which row a moment counts in: its local date's day, week or month.
	when := func(t time.Time) tally.ReportRow { return rowKey(group, t.In(loc).Format(time.DateOnly), "", "", "") }

	rows := map[tally.ReportRow]*tally.ReportRow{}
	add := func(at time.Time, it store.Item) error {
		_, offerID, partnerID, currency, ok := parseRollupSK(it.SK)
		if !ok {
			return fmt.Errorf("report: malformed rollup key %q", it.SK)
		}
		if (q.OfferID != "" && offerID != q.OfferID) || (q.PartnerID != "" && partnerID != q.PartnerID) {
			return nil
		}
		key := rowKey(group, at.In(loc).Format(time.DateOnly), offerID, partnerID, currency)
		row, ok := rows[key]
		if !ok {
			row = &tally.ReportRow{}
			*row = key
			rows[key] = row
		}
		n := it.Nums
		row.Conversions += n["conversions"]
		row.Pending += n[tally.ConversionPending]
		row.Approved += n[tally.ConversionApproved]
		row.Rejected += n[tally.ConversionRejected]
		row.Reversed += n[tally.ConversionReversed]
		row.RevenueCents += n["revenueCents"]
		row.PayoutCents += n["payoutCents"]
		row.Clicks += n["clicks"]
		row.HighRiskClicks += n["highRiskClicks"]
		return nil
	}

	// Runs of UTC days read the same way, in order.
	type run struct {
		first, last time.Time
		whole       bool
	}
	var runs []run
	for day := start.UTC().Truncate(24 * time.Hour); day.Before(end); day = day.Add(24 * time.Hour) {
		next := day.Add(24 * time.Hour)
		whole := !day.Before(start) && !next.After(end) && when(day) == when(next.Add(-time.Nanosecond))
		if n := len(runs); n > 0 && runs[n-1].whole == whole {
			runs[n-1].last = day
		} else {
			runs = append(runs, run{first: day, last: day, whole: whole})
		}
	}
	for _, r := range runs {
		first, last := r.first.Format(time.DateOnly), r.last.Format(time.DateOnly)
		if r.whole {
			err = s.eachRollup(ctx, func(shard int) store.Query {
				return store.Query{PK: keys.RollupPK(brandID, shard), SKFrom: first, SKTo: keys.RollupDayTo(last)}
			}, func(it store.Item) error {
				day, _ := time.Parse(time.DateOnly, it.SK[:len(time.DateOnly)])
				return add(day, it)
			})
		} else {
			err = s.eachRollup(ctx, func(shard int) store.Query {
				return store.Query{PK: keys.RollupQuarterPK(brandID, shard), SKFrom: keys.RollupQuartersFrom(first), SKTo: keys.RollupQuartersTo(last)}
			}, func(it store.Item) error {
				at, err := time.Parse(quarterLayout, it.SK[:len(quarterLayout)])
				if err != nil {
					return fmt.Errorf("report: malformed rollup key %q", it.SK)
				}
				if at.Before(start) || !at.Before(end) {
					return nil
				}
				return add(at, it)
			})
		}
		if err != nil {
			return Report{}, err
		}
	}
	out := make([]tally.ReportRow, 0, len(rows))
	for _, r := range rows {
		r.ProfitCents = r.RevenueCents - r.PayoutCents
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b tally.ReportRow) int {
		return cmp.Or(cmp.Compare(a.Day, b.Day), cmp.Compare(a.Week, b.Week), cmp.Compare(a.Month, b.Month),
			cmp.Compare(a.OfferID, b.OfferID), cmp.Compare(a.PartnerID, b.PartnerID), cmp.Compare(a.Currency, b.Currency))
	})
	return Report{Data: out, From: from, To: to, Timezone: loc.String(), GroupBy: append([]string{}, q.GroupBy...)}, nil
}

// eachRollup reads every page of the query that query(shard) makes, for
// each shard, and hands fn the items.
func (s *Service) eachRollup(ctx context.Context, query func(shard int) store.Query, fn func(store.Item) error) error {
	for shard := range keys.Shards {
		q := query(shard)
		q.Limit = 1000
		for {
			page, err := s.db.Query(ctx, q)
			if err != nil {
				return err
			}
			for _, it := range page.Items {
				if err := fn(it); err != nil {
					return err
				}
			}
			if q.Cursor = page.Cursor; q.Cursor == "" {
				break
			}
		}
	}
	return nil
}

// reportZone reads the timezone parameter: an IANA zone name, default UTC.
func (s *Service) reportZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	loc, err := s.zones(name)
	if err != nil || name == "Local" || len(name) > 64 {
		return nil, validate.InvalidField("timezone", "timezone must be an IANA time zone name such as UTC, Europe/Paris or America/New_York.")
	}
	return loc, nil
}

// localMidnight is the first moment, in loc, of the date (YYYY-MM-DD,
// already valid) plus days; on a day that starts with a DST gap, the first
// moment that exists.
func localMidnight(date string, days int, loc *time.Location) time.Time {
	d, _ := time.Parse(time.DateOnly, date)
	d = d.AddDate(0, 0, days)
	t := time.Date(d.Year(), d.Month(), d.Day(), 0, 0, 0, 0, loc)
	if t.Day() != d.Day() { // midnight did not exist: time.Date normalized backwards
		t = time.Date(d.Year(), d.Month(), d.Day(), 1, 0, 0, 0, loc)
	}
	return t
}

// rowKey is the identity of the row a rollup adds to: its grouping values.
func rowKey(group map[string]bool, day, offerID, partnerID, currency string) tally.ReportRow {
	k := tally.ReportRow{Currency: currency}
	t, _ := time.Parse(time.DateOnly, day)
	if group["day"] {
		k.Day = day
	}
	if group["week"] {
		y, w := t.ISOWeek()
		k.Week = fmt.Sprintf("%04d-W%02d", y, w)
	}
	if group["month"] {
		k.Month = t.Format("2006-01")
	}
	if group["offer"] {
		k.OfferID = offerID
	}
	if group["partner"] {
		k.PartnerID = partnerID
	}
	return k
}

func parseRollupSK(sk string) (day, offerID, partnerID, currency string, ok bool) {
	parts := strings.Split(sk, "#")
	if len(parts) != 4 {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], parts[3], true
}

// reportRange validates the dates of a report and fills in the defaults:
// to is today where now is.
func reportRange(from, to string, now time.Time) (string, string, error) {
	toDate, _ := time.Parse(time.DateOnly, now.Format(time.DateOnly))
	if to != "" {
		t, err := validate.DateParam("to", to)
		if err != nil {
			return "", "", err
		}
		toDate = t
	}
	fromDate := toDate.AddDate(0, 0, -29)
	if from != "" {
		f, err := validate.DateParam("from", from)
		if err != nil {
			return "", "", err
		}
		fromDate = f
	}
	switch days := int(toDate.Sub(fromDate).Hours()/24) + 1; {
	case days < 1:
		return "", "", validate.Invalid("from must not be after to.")
	case days > maxReportDays:
		return "", "", validate.Invalid("A report covers at most %d days; narrow from and to.", maxReportDays)
	}
	return fromDate.Format(time.DateOnly), toDate.Format(time.DateOnly), nil
}

// WriteCSV writes the report's rows as CSV: a header line, then one line
// per row with the grouping columns asked for, in the order asked, then the
// currency and the metrics.
func (r Report) WriteCSV(w io.Writer) error {
	columns := map[string]string{"day": "day", "week": "week", "month": "month", "offer": "offerId", "partner": "partnerId"}
	header := []string{}
	for _, g := range r.GroupBy {
		header = append(header, columns[g])
	}
	header = append(header, "currency", "conversions", "pending", "approved", "rejected", "reversed", "revenueCents", "payoutCents", "profitCents", "clicks", "highRiskClicks")
	cw := csv.NewWriter(w)
	if err := cw.Write(header); err != nil {
		return err
	}
	for _, row := range r.Data {
		values := map[string]string{"day": row.Day, "week": row.Week, "month": row.Month, "offer": row.OfferID, "partner": row.PartnerID}
		line := []string{}
		for _, g := range r.GroupBy {
			line = append(line, values[g])
		}
		for _, n := range []int64{row.Conversions, row.Pending, row.Approved, row.Rejected, row.Reversed, row.RevenueCents, row.PayoutCents, row.ProfitCents, row.Clicks, row.HighRiskClicks} {
			line = append(line, strconv.FormatInt(n, 10))
		}
		line = slices.Insert(line, len(r.GroupBy), row.Currency)
		if err := cw.Write(line); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
