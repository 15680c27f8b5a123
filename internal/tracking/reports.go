package tracking

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/store"
)

// maxReportDays bounds one report's range.
const maxReportDays = 366

// ReportQuery is GET /reports. From and To are UTC dates, inclusive; empty
// To is today and empty From is 29 days before To. GroupBy holds any of
// day, week, month, offer, partner.
type ReportQuery struct {
	From, To  string
	OfferID   string
	PartnerID string
	GroupBy   []string
}

// Report is the answer to a ReportQuery, with the range it resolved to.
type Report struct {
	Data    []tally.ReportRow `json:"data"`
	From    string            `json:"from"`
	To      string            `json:"to"`
	GroupBy []string          `json:"groupBy"`
}

var reportGroups = []string{"day", "week", "month", "offer", "partner"}

// Report sums the brand's rollups over the range into rows, one per
// combination of the grouping values and currency (amounts in different
// currencies are never added together). Rows are sorted by their grouping
// values, then currency.
func (s *Service) Report(ctx context.Context, brandID string, q ReportQuery) (Report, error) {
	from, to, err := reportRange(q.From, q.To, s.Now())
	if err != nil {
		return Report{}, err
	}
	if err := firstError(idFilter("offerId", "off_", q.OfferID), idFilter("partnerId", "prt_", q.PartnerID)); err != nil {
		return Report{}, err
	}
	group := map[string]bool{}
	for _, g := range q.GroupBy {
		if !slices.Contains(reportGroups, g) || group[g] {
			return Report{}, invalid("groupBy must be a comma-separated list of distinct values from: %s.", strings.Join(reportGroups, ", "))
		}
		group[g] = true
	}
	rows := map[tally.ReportRow]*tally.ReportRow{}
	for shard := range shards {
		query := store.Query{PK: rollupPK(brandID, shard), SKFrom: from, SKTo: rollupDayTo(to), Limit: 1000}
		for {
			page, err := s.store.Query(ctx, query)
			if err != nil {
				return Report{}, err
			}
			for _, it := range page.Items {
				day, offerID, partnerID, currency, ok := parseRollupSK(it.SK)
				if !ok {
					return Report{}, fmt.Errorf("report: malformed rollup key %q", it.SK)
				}
				if (q.OfferID != "" && offerID != q.OfferID) || (q.PartnerID != "" && partnerID != q.PartnerID) {
					continue
				}
				key := rowKey(group, day, offerID, partnerID, currency)
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
				row.RevenueCents += n["revenueCents"]
				row.PayoutCents += n["payoutCents"]
			}
			if query.Cursor = page.Cursor; query.Cursor == "" {
				break
			}
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
	return Report{Data: out, From: from, To: to, GroupBy: append([]string{}, q.GroupBy...)}, nil
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

// reportRange validates the dates of a report and fills in the defaults.
func reportRange(from, to string, now time.Time) (string, string, error) {
	toDate := now.UTC().Truncate(24 * time.Hour)
	if to != "" {
		t, err := time.Parse(time.DateOnly, to)
		if err != nil {
			return "", "", invalid("to must be a date (YYYY-MM-DD).")
		}
		toDate = t
	}
	fromDate := toDate.AddDate(0, 0, -29)
	if from != "" {
		f, err := time.Parse(time.DateOnly, from)
		if err != nil {
			return "", "", invalid("from must be a date (YYYY-MM-DD).")
		}
		fromDate = f
	}
	switch days := int(toDate.Sub(fromDate).Hours()/24) + 1; {
	case days < 1:
		return "", "", invalid("from must not be after to.")
	case days > maxReportDays:
		return "", "", invalid("A report covers at most %d days; narrow from and to.", maxReportDays)
	}
	return fromDate.Format(time.DateOnly), toDate.Format(time.DateOnly), nil
}
