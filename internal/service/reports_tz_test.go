package service_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// Reports in a time zone, served from the rollups, equal what the raw
// conversions give when each is put on its local date: across DST changes
// (New York's fall-back day has 25 hours, London's 25 too), in zones whose
// offset is a half or three quarters of an hour (Kolkata, Kathmandu,
// Chatham), and in Lord Howe, whose DST moves the clock by 30 minutes.
func TestReportsInTimeZonesMatchConversions(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		rng := rand.New(rand.NewPCG(3, 4))
		offers := []tally.Offer{f.offer(tally.ApprovalManual, 0, tally.Caps{}), f.offer(tally.ApprovalAuto, 0, tally.Caps{})}
		partners := []tally.Partner{f.partner(true), f.partner(true)}

		// Moments either side of New York's midnights around its next
		// fall-back after the fixture's start (02:00 EDT becomes 01:00 EST
		// on the first Sunday of November), then random moments over three
		// weeks that span it, London's a week before, and the end of
		// October.
		day := newYorkFallBack(start)
		date := func(days int) string { return day.AddDate(0, 0, days).Format(time.DateOnly) }
		at := []time.Time{
			day.Add(3*time.Hour + 59*time.Minute + 59*time.Second), // Saturday 23:59:59 EDT
			day.Add(4 * time.Hour),                                 // Sunday 00:00 EDT
			day.Add(5*time.Hour + 59*time.Minute),                  // 01:59 EDT
			day.Add(6 * time.Hour),                                 // 01:00 EST, the second time
			day.Add(28*time.Hour + 59*time.Minute),                 // Sunday 23:59 EST
			day.Add(29 * time.Hour),                                // Monday 00:00 EST
		}
		first := day.AddDate(0, 0, -12)
		for range 120 {
			at = append(at, first.Add(time.Duration(rng.Int64N(int64(21*24*time.Hour)))).Truncate(time.Second))
		}
		for _, when := range at {
			f.clock.Set(when)
			f.convert(offers[rng.IntN(2)].ID, partners[rng.IntN(2)].ID, conversions.ConversionInput{
				RevenueCents: ptr(rng.Int64N(10_000)), PayoutCents: ptr(rng.Int64N(3_000)),
				Currency: ptr([]string{"USD", "EUR"}[rng.IntN(2)]),
			})
		}
		for _, c := range f.allConversions(conversions.ConversionFilter{Status: "pending"}, 100) {
			if rng.IntN(2) == 0 {
				if _, err := f.svc.Conversions.RejectConversion(f.ctx, f.brandID, c.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		all := f.allConversions(conversions.ConversionFilter{}, 100)

		for _, zone := range []string{"America/New_York", "Europe/London", "Asia/Kolkata", "Asia/Kathmandu", "Pacific/Chatham", "Australia/Lord_Howe", "UTC", ""} {
			for _, q := range []reports.ReportQuery{
				{From: date(-11), To: date(7), GroupBy: []string{"day"}},
				{From: date(-11), To: date(7), GroupBy: []string{"week", "offer"}},
				{From: date(-12), To: date(9), GroupBy: []string{"month"}},
				{From: date(-7), To: date(2)},
				{From: date(0), To: date(0), GroupBy: []string{"day", "partner"}, OfferID: offers[0].ID},
			} {
				q.Timezone = zone
				got, err := f.svc.Reports.Report(f.ctx, f.brandID, q)
				if err != nil {
					t.Fatal(err)
				}
				want := expectedReport(all, q)
				if !reflect.DeepEqual(got.Data, want) && !(len(got.Data) == 0 && len(want) == 0) {
					t.Errorf("report %+v:\n got %+v\nwant %+v", q, got.Data, want)
				}
				if wantZone := map[string]string{"": "UTC"}[zone]; got.Timezone != zone && got.Timezone != wantZone {
					t.Errorf("report in %q says timezone %q", zone, got.Timezone)
				}
			}
		}

		// New York's fall-back day: the four moments on it count there,
		// the two either side do not.
		got, err := f.svc.Reports.Report(f.ctx, f.brandID, reports.ReportQuery{From: date(0), To: date(0), Timezone: "America/New_York"})
		if err != nil {
			t.Fatal(err)
		}
		var onDay int64
		for _, c := range all {
			if c.CreatedAt.In(mustZone(t, "America/New_York")).Format(time.DateOnly) == date(0) {
				onDay++
			}
		}
		var counted int64
		for _, r := range got.Data {
			counted += r.Conversions
		}
		if counted != onDay || onDay < 4 {
			t.Errorf("%s in New York: %d conversions in the report, %d recorded that day (at least the 4 placed there)", date(0), counted, onDay)
		}
	})
}

// newYorkFallBack returns midnight UTC of the first Sunday of November on
// or after t's date (or in the next year): the day New York falls back.
func newYorkFallBack(t time.Time) time.Time {
	for y := t.Year(); ; y++ {
		d := time.Date(y, time.November, 1, 0, 0, 0, 0, time.UTC)
		d = d.AddDate(0, 0, (7-int(d.Weekday()))%7)
		if !d.Before(t.Truncate(24 * time.Hour)) {
			return d
		}
	}
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestReportTimezoneValidation(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	for _, zone := range []string{"Mars/Olympus", "Local", "EST5EDT,M3.2.0", "../../etc/passwd", "utc "} {
		_, err := f.svc.Reports.Report(f.ctx, f.brandID, reports.ReportQuery{Timezone: zone})
		if tally.ErrorCode(err) != tally.ECodeValidation {
			t.Errorf("timezone %q: %v, want a validation error", zone, err)
		}
	}
	// The default range ends today in the zone: at 20:00 UTC it is already
	// tomorrow in Auckland.
	f.clock.Set(start.Add(10 * time.Hour))
	to := start.AddDate(0, 0, 1).Format(time.DateOnly)
	from := start.AddDate(0, 0, -28).Format(time.DateOnly)
	r, err := f.svc.Reports.Report(f.ctx, f.brandID, reports.ReportQuery{Timezone: "Pacific/Auckland"})
	if err != nil || r.To != to || r.From != from {
		t.Errorf("default range in Auckland: %s..%s, %v; want %s..%s", r.From, r.To, err, from, to)
	}
}
