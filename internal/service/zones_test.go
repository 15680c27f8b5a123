package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/testenv"
)

// Reports load their time zones with WithZones' function when one is set
// (on Lambda, internal/tzdb's embedded database): a zone only it knows
// works, one it does not know is refused.
func TestReportsLoadZonesWithWithZones(t *testing.T) {
	plus5 := time.FixedZone("PLUS5", 5*3600)
	load := func(name string) (*time.Location, error) {
		if name == "Test/Plus5" {
			return plus5, nil
		}
		return nil, errors.New("unknown zone")
	}
	svc := servicetest.New(testenv.Bolt(t), service.WithZones(load))
	ctx := context.Background()
	b, err := svc.Identity.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	q := reports.ReportQuery{From: "2026-11-01", To: "2026-11-02", GroupBy: []string{"day"}, Timezone: "Test/Plus5"}
	if _, err := svc.Reports.Report(ctx, b.ID, q); err != nil {
		t.Fatalf("report in the zone only WithZones knows: %v", err)
	}
	q.Timezone = "Europe/Paris"
	if _, err := svc.Reports.Report(ctx, b.ID, q); err == nil {
		t.Fatal("report in a zone WithZones does not know: no error")
	}
}
