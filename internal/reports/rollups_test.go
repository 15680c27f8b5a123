package reports

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// TestRollUpSplitsBatchesAndCountsOnce hands RollUp a batch of conversions
// on 60 offers, 120 rollup items, more than a transaction takes, on both
// stores: whole, again, in parts that cut across its transactions, and
// four times at once. Every conversion counts once; one written with its
// rollups (no mark) not at all.
func TestRollUpSplitsBatchesAndCountsOnce(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		at := testenv.Start().Add(7 * time.Minute)
		svc := New(records.New(st, func() time.Time { return at }, records.SpreadIDs{}), time.LoadLocation)
		const n = 60
		brandID := ids.New("brd_", at)
		var changes []StreamChange
		want := tally.ReportRow{Currency: "EUR"}
		for i := range n {
			c := tally.Conversion{ID: ids.New("cnv_", at), BrandID: brandID, OfferID: ids.New("off_", at), PartnerID: ids.New("prt_", at),
				RevenueCents: int64(100 + i), PayoutCents: 10, Currency: "EUR", Status: tally.ConversionApproved, CreatedAt: tally.NewTime(at)}
			it := store.Item{Key: keys.Conversion(c.BrandID, c.ID), Attrs: map[string]string{"status": c.Status}, Data: records.MustJSON(c)}
			if i == 5 {
				it.Attrs = map[string]string{"status": c.Status} // recorded with its rollups
			} else {
				it.Attrs[rolledUpAttr] = rolledUpFromStream
				want.Conversions++
				want.Approved++
				want.RevenueCents += c.RevenueCents
				want.PayoutCents += c.PayoutCents
			}
			changes = append(changes, StreamChange{Seq: fmt.Sprintf("442158450000000001745%07d", 9091+i*7), Item: it})
		}
		want.ProfitCents = want.RevenueCents - want.PayoutCents
		check := func(when string) {
			t.Helper()
			r, err := svc.Report(ctx, brandID, ReportQuery{From: at.Format(time.DateOnly), To: at.Format(time.DateOnly)})
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Data) != 1 || !reflect.DeepEqual(r.Data[0], want) {
				t.Errorf("%s: report %+v, want %+v", when, r.Data, want)
			}
		}
		const shard = "arn:aws:dynamodb:eu-west-1:123456789012:table/tally/stream/2026-11-01T09:12:44.518#shardId-00000001795300000000-4b2e9c1a"
		roll := func(recs []StreamChange) {
			t.Helper()
			if err := svc.RollUp(ctx, shard, recs); err != nil {
				t.Error(err) // Error, not Fatal: it also runs in goroutines
			}
		}
		roll(changes[:10])
		roll(changes) // the rest, in two transactions: 100 items and the checkpoint do not fit in one
		check("after the batch")
		roll(changes)
		roll(changes[40:]) // bisected after it was applied, across its transactions
		roll(changes[:40])
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() { roll(changes) })
		}
		wg.Wait()
		check("after the batch came again")
	})
}

func TestSeqAfter(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"1", "", true}, {"10", "9", true}, {"9", "10", false}, {"4421584600000000017450439125", "4421584500000000017450439091", true},
		{"111", "111", false}, {"110", "111", false},
	} {
		if got := seqAfter(c.a, c.b); got != c.want {
			t.Errorf("seqAfter(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}
