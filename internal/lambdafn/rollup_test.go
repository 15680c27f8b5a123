package lambdafn_test

import (
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/reports"
)

// The brand and the day of the conversions in
// events/rollup-stream.json (its data is fixed: an item's data is binary,
// which the sample's variables cannot reach).
const (
	rollupSampleBrand = "brd_01kaqhzz2r4t6y8a0c2e4g6j8m"
	rollupSampleDay   = "2026-11-22"
)

func init() {
	cases["rollup-stream"] = sampleCase{
		rollup: func(t *testing.T, f *fixture, ev events.DynamoDBTimeWindowEvent, call func(events.DynamoDBTimeWindowEvent) error) {
			if len(ev.Records) != 2 || ev.ShardID == "" {
				t.Fatalf("the sample should be two conversion inserts of one shard: %+v", ev)
			}
			if err := call(ev); err != nil {
				t.Fatal(err)
			}
			wantRollupSample(t, f, "after the batch")

			// Lambda retries a batch whole, or bisected, after an error it
			// may have had after writing: nothing counts twice.
			if err := call(ev); err != nil {
				t.Fatal(err)
			}
			half := ev
			half.Records = ev.Records[1:]
			if err := call(half); err != nil {
				t.Fatal(err)
			}
			wantRollupSample(t, f, "after the batch was repeated")

			// Without a tumbling window the batch names no shard.
			bare := ev
			bare.ShardID = ""
			if err := call(bare); err == nil {
				t.Error("a batch without a shard id was taken")
			}
		},
	}
}

// wantRollupSample checks the report of the sample's brand and day: one
// approved conversion of 89.90/15.00 and one pending of 45.00/8.00, in EUR.
func wantRollupSample(t *testing.T, f *fixture, when string) {
	t.Helper()
	want := []tally.ReportRow{{Currency: "EUR", Conversions: 2, Approved: 1, Pending: 1, RevenueCents: 13490, PayoutCents: 2300, ProfitCents: 11190}}
	r, err := f.svc.Reports.Report(t.Context(), rollupSampleBrand, reports.ReportQuery{From: rollupSampleDay, To: rollupSampleDay})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r.Data, want) {
		t.Errorf("%s: report %+v, want %+v", when, r.Data, want)
	}
}
