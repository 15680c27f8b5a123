package service_test

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// expectedReport computes a report from raw conversions, the way a user
// would check one by hand.
func expectedReport(cs []tally.Conversion, q reports.ReportQuery) []tally.ReportRow {
	loc := time.UTC
	if q.Timezone != "" {
		var err error
		if loc, err = time.LoadLocation(q.Timezone); err != nil {
			panic(err)
		}
	}
	group := map[string]bool{}
	for _, g := range q.GroupBy {
		group[g] = true
	}
	rows := map[tally.ReportRow]*tally.ReportRow{}
	for _, c := range cs {
		local := c.CreatedAt.In(loc)
		day := local.Format(time.DateOnly)
		if day < q.From || day > q.To || (q.OfferID != "" && c.OfferID != q.OfferID) || (q.PartnerID != "" && c.PartnerID != q.PartnerID) {
			continue
		}
		k := tally.ReportRow{Currency: c.Currency}
		if group["day"] {
			k.Day = day
		}
		if group["week"] {
			y, w := local.ISOWeek()
			k.Week = fmt.Sprintf("%04d-W%02d", y, w)
		}
		if group["month"] {
			k.Month = local.Format("2006-01")
		}
		if group["offer"] {
			k.OfferID = c.OfferID
		}
		if group["partner"] {
			k.PartnerID = c.PartnerID
		}
		r, ok := rows[k]
		if !ok {
			r = &tally.ReportRow{}
			*r = k
			rows[k] = r
		}
		r.Conversions++
		switch c.Status {
		case "pending":
			r.Pending++
		case "approved":
			r.Approved++
		case "rejected":
			r.Rejected++
			continue
		}
		r.RevenueCents += c.RevenueCents
		r.PayoutCents += c.PayoutCents
	}
	var out []tally.ReportRow
	for _, r := range rows {
		r.ProfitCents = r.RevenueCents - r.PayoutCents
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b tally.ReportRow) int {
		return strings.Compare(fmt.Sprint(a.Day, a.Week, a.Month, a.OfferID, a.PartnerID, a.Currency),
			fmt.Sprint(b.Day, b.Week, b.Month, b.OfferID, b.PartnerID, b.Currency))
	})
	return out
}

func TestReportsMatchConversions(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		rng := rand.New(rand.NewPCG(1, 2))
		offers := []tally.Offer{f.offer(tally.ApprovalManual, 0, tally.Caps{}), f.offer(tally.ApprovalAuto, 0, tally.Caps{})}
		partners := []tally.Partner{f.partner(true), f.partner(true), f.partner(true)}
		currencies := []string{"USD", "EUR"}

		// n conversions over 40 days (across a month and several ISO
		// weeks), then random decisions on the pending ones.
		const n = 150
		for i := range n {
			f.clock.Set(start.Add(time.Duration(i) * 40 * 24 * time.Hour / n))
			o, p := offers[rng.IntN(2)], partners[rng.IntN(3)]
			f.convert(o.ID, p.ID, conversions.ConversionInput{
				RevenueCents: ptr(rng.Int64N(10_000)), PayoutCents: ptr(rng.Int64N(3_000)),
				Currency: ptr(currencies[rng.IntN(2)]),
			})
		}
		for _, c := range f.allConversions(conversions.ConversionFilter{Status: "pending"}, 100) {
			var err error
			switch rng.IntN(3) {
			case 0:
				_, err = f.svc.Conversions.ApproveConversion(f.ctx, f.brandID, c.ID)
			case 1:
				_, err = f.svc.Conversions.RejectConversion(f.ctx, f.brandID, c.ID)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		all := f.allConversions(conversions.ConversionFilter{}, 100)
		if len(all) != n {
			t.Fatalf("listed %d conversions, want %d", len(all), n)
		}

		day := func(days int) string { return start.AddDate(0, 0, days).Format(time.DateOnly) }
		end, oneDay := day(40), day(11)
		for _, q := range []reports.ReportQuery{
			{From: day(-19), To: end},
			{From: day(-19), To: end, GroupBy: []string{"day"}},
			{From: day(5), To: day(20), GroupBy: []string{"week", "partner"}},
			{From: day(-19), To: end, GroupBy: []string{"month", "offer", "partner"}},
			{From: day(-19), To: end, OfferID: offers[0].ID, GroupBy: []string{"day", "partner"}},
			{From: oneDay, To: oneDay, PartnerID: partners[1].ID, GroupBy: []string{"offer"}},
		} {
			got, err := f.svc.Reports.Report(f.ctx, f.brandID, q)
			if err != nil {
				t.Fatal(err)
			}
			want := expectedReport(all, q)
			if !reflect.DeepEqual(got.Data, want) && !(len(got.Data) == 0 && len(want) == 0) {
				t.Errorf("report %+v:\n got %+v\nwant %+v", q, got.Data, want)
			}
			currencyRows := map[string]bool{}
			for _, r := range got.Data {
				currencyRows[r.Currency] = true
			}
			if len(got.Data) > 0 && len(currencyRows) != 2 && q.From != oneDay {
				t.Errorf("report %+v has rows for currencies %v, want both USD and EUR split", q, currencyRows)
			}
		}
	})
}

func TestReportValidation(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	for _, q := range []reports.ReportQuery{
		{From: "2026-13-01"},
		{To: "yesterday"},
		{From: "2026-11-10", To: "2026-11-01"},
		{From: "2024-01-01", To: "2026-01-01"},
		{GroupBy: []string{"hour"}},
		{GroupBy: []string{"day", "day"}},
		{OfferID: "nope"},
	} {
		if _, err := f.svc.Reports.Report(f.ctx, f.brandID, q); tally.ErrorCode(err) != tally.ECodeValidation {
			t.Errorf("report %+v: %v, want validation_error", q, err)
		}
	}
	r, err := f.svc.Reports.Report(f.ctx, f.brandID, reports.ReportQuery{})
	to, from := start.Format(time.DateOnly), start.AddDate(0, 0, -29).Format(time.DateOnly)
	if err != nil || r.To != to || r.From != from || r.Data == nil || r.GroupBy == nil {
		t.Errorf("default report = %+v, %v; want the 30 days up to today, empty lists not null", r, err)
	}
}

func TestConversionListsFilterAndPage(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		o1, o2 := f.offer(tally.ApprovalManual, 0, tally.Caps{}), f.offer(tally.ApprovalAuto, 0, tally.Caps{})
		p1, p2 := f.partner(true), f.partner(true)
		var made []tally.Conversion
		for i := range 37 {
			f.clock.Set(start.Add(time.Duration(i) * time.Hour))
			o, p := o1, p1
			if i%3 == 0 {
				o = o2
			}
			if i%2 == 0 {
				p = p2
			}
			made = append(made, f.convert(o.ID, p.ID, conversions.ConversionInput{ExternalTxnID: ptr(fmt.Sprint("txn-", i))}))
		}
		slices.Reverse(made) // newest first
		ids := func(cs []tally.Conversion) []string {
			out := make([]string, len(cs))
			for i, c := range cs {
				out[i] = c.ID
			}
			return out
		}
		filtered := func(keep func(tally.Conversion) bool) []string {
			var out []tally.Conversion
			for _, c := range made {
				if keep(c) {
					out = append(out, c)
				}
			}
			return ids(out)
		}
		nextDay := start.AddDate(0, 0, 1).Format(time.DateOnly)
		for name, tc := range map[string]struct {
			filter conversions.ConversionFilter
			keep   func(tally.Conversion) bool
		}{
			"all":               {conversions.ConversionFilter{}, func(tally.Conversion) bool { return true }},
			"offer":             {conversions.ConversionFilter{OfferID: o2.ID}, func(c tally.Conversion) bool { return c.OfferID == o2.ID }},
			"partner":           {conversions.ConversionFilter{PartnerID: p1.ID}, func(c tally.Conversion) bool { return c.PartnerID == p1.ID }},
			"offer and partner": {conversions.ConversionFilter{OfferID: o1.ID, PartnerID: p2.ID}, func(c tally.Conversion) bool { return c.OfferID == o1.ID && c.PartnerID == p2.ID }},
			"status":            {conversions.ConversionFilter{Status: "pending"}, func(c tally.Conversion) bool { return c.Status == "pending" }},
			"txn":               {conversions.ConversionFilter{ExternalTxnID: "txn-7"}, func(c tally.Conversion) bool { return c.ExternalTxnID == "txn-7" }},
			"time range": {conversions.ConversionFilter{From: start.Add(5 * time.Hour).Format(time.RFC3339), To: start.Add(9 * time.Hour).Format(time.RFC3339)},
				func(c tally.Conversion) bool {
					return !c.CreatedAt.Before(start.Add(5*time.Hour)) && !c.CreatedAt.After(start.Add(9*time.Hour))
				}},
			"dates": {conversions.ConversionFilter{From: nextDay, To: nextDay}, func(c tally.Conversion) bool { return c.CreatedAt.Format(time.DateOnly) == nextDay }},
		} {
			for _, limit := range []int{1, 4, 100} {
				got := ids(f.allConversions(tc.filter, limit))
				if want := filtered(tc.keep); !slices.Equal(got, want) {
					t.Errorf("%s, limit %d:\n got %v\nwant %v", name, limit, got, want)
				}
			}
		}
		// from after to is refused, as on reports, rather than an empty list.
		if _, _, err := f.svc.Conversions.Conversions(f.ctx, f.brandID, conversions.ConversionFilter{From: start.AddDate(0, 0, 2).Format(time.DateOnly), To: nextDay}, records.ListParams{}); tally.ErrorCode(err) != tally.ECodeValidation {
			t.Errorf("from after to: %v, want a validation error", err)
		}
		// A cursor continues only the query it came from.
		_, next, err := f.svc.Conversions.Conversions(f.ctx, f.brandID, conversions.ConversionFilter{OfferID: o1.ID}, records.ListParams{Limit: 2})
		if err != nil || next == "" {
			t.Fatalf("first page: next %q, %v", next, err)
		}
		if _, _, err := f.svc.Conversions.Conversions(f.ctx, f.brandID, conversions.ConversionFilter{OfferID: o2.ID}, records.ListParams{Cursor: next}); tally.ErrorCode(err) != tally.ECodeValidation {
			t.Errorf("cursor reused with another filter: %v, want validation_error", err)
		}
		for _, bad := range []records.ListParams{{Cursor: "not-a-cursor"}, {Limit: 101}, {Limit: -1}} {
			if _, _, err := f.svc.Conversions.Conversions(f.ctx, f.brandID, conversions.ConversionFilter{}, bad); tally.ErrorCode(err) != tally.ECodeValidation {
				t.Errorf("params %+v: %v, want validation_error", bad, err)
			}
		}
	})
}
