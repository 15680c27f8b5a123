package tracking_test

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/tracking"
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

		// Moments either side of New York's midnights around its fall-back
		// (2026-11-01 02:00 EDT becomes 01:00 EST), then random moments over
		// three weeks that span it and the end of October.
		at := []time.Time{
			time.Date(2026, 11, 1, 3, 59, 59, 0, time.UTC), // Oct 31 23:59:59 EDT
			time.Date(2026, 11, 1, 4, 0, 0, 0, time.UTC),   // Nov 1 00:00 EDT
			time.Date(2026, 11, 1, 5, 59, 0, 0, time.UTC),  // 01:59 EDT
			time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC),   // 01:00 EST, the second time
			time.Date(2026, 11, 2, 4, 59, 0, 0, time.UTC),  // Nov 1 23:59 EST
			time.Date(2026, 11, 2, 5, 0, 0, 0, time.UTC),   // Nov 2 00:00 EST
		}
		first := time.Date(2026, 10, 20, 0, 0, 0, 0, time.UTC)
		for range 250 {
			at = append(at, first.Add(time.Duration(rng.Int64N(int64(21*24*time.Hour)))).Truncate(time.Second))
		}
		for _, when := range at {
			f.clock.Set(when)
			f.convert(offers[rng.IntN(2)].ID, partners[rng.IntN(2)].ID, tracking.ConversionInput{
				RevenueCents: ptr(rng.Int64N(10_000)), PayoutCents: ptr(rng.Int64N(3_000)),
				Currency: ptr([]string{"USD", "EUR"}[rng.IntN(2)]),
			})
		}
		for _, c := range f.allConversions(tracking.ConversionFilter{Status: "pending"}, 100) {
			if rng.IntN(2) == 0 {
				if _, err := f.svc.RejectConversion(f.ctx, f.brandID, c.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		all := f.allConversions(tracking.ConversionFilter{}, 100)

		for _, zone := range []string{"America/New_York", "Europe/London", "Asia/Kolkata", "Asia/Kathmandu", "Pacific/Chatham", "Australia/Lord_Howe", "UTC", ""} {
			for _, q := range []tracking.ReportQuery{
				{From: "2026-10-21", To: "2026-11-08", GroupBy: []string{"day"}},
				{From: "2026-10-21", To: "2026-11-08", GroupBy: []string{"week", "offer"}},
				{From: "2026-10-20", To: "2026-11-10", GroupBy: []string{"month"}},
				{From: "2026-10-25", To: "2026-11-03"},
				{From: "2026-11-01", To: "2026-11-01", GroupBy: []string{"day", "partner"}, OfferID: offers[0].ID},
			} {
				q.Timezone = zone
				got, err := f.svc.Report(f.ctx, f.brandID, q)
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
		got, err := f.svc.Report(f.ctx, f.brandID, tracking.ReportQuery{From: "2026-11-01", To: "2026-11-01", Timezone: "America/New_York"})
		if err != nil {
			t.Fatal(err)
		}
		var onDay int64
		for _, c := range all {
			if c.CreatedAt.In(mustZone(t, "America/New_York")).Format(time.DateOnly) == "2026-11-01" {
				onDay++
			}
		}
		var counted int64
		for _, r := range got.Data {
			counted += r.Conversions
		}
		if counted != onDay || onDay < 4 {
			t.Errorf("2026-11-01 in New York: %d conversions in the report, %d recorded that day (at least the 4 placed there)", counted, onDay)
		}
	})
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
		_, err := f.svc.Report(f.ctx, f.brandID, tracking.ReportQuery{Timezone: zone})
		if tally.ErrorCode(err) != tally.ECodeValidation {
			t.Errorf("timezone %q: %v, want a validation error", zone, err)
		}
	}
	// The default range ends today in the zone: at 20:00 UTC it is already
	// tomorrow in Auckland.
	f.clock.Set(time.Date(2026, 11, 20, 20, 0, 0, 0, time.UTC))
	r, err := f.svc.Report(f.ctx, f.brandID, tracking.ReportQuery{Timezone: "Pacific/Auckland"})
	if err != nil || r.To != "2026-11-21" || r.From != "2026-10-23" {
		t.Errorf("default range in Auckland: %s..%s, %v; want 2026-10-23..2026-11-21", r.From, r.To, err)
	}
}
