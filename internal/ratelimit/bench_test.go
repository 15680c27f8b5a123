package ratelimit_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/testenv"
)

// BenchmarkShared counts requests in the embedded store: "admitted" each
// in a bucket of its own (one write each), "leased" back to back in one
// bucket with a high limit (most from the instance's lease: it reports the
// writes a request), "refused" in one bucket whose window is full.
func BenchmarkShared(b *testing.B) {
	bst, err := bolt.Open(b.TempDir()+"/tally.db", bolt.WithoutSweep())
	if err != nil {
		b.Fatal(err)
	}
	defer bst.Close()
	st := testenv.CountWrites(bst)
	now := time.Now().Truncate(time.Minute).Add(20 * time.Second)
	limits := ratelimit.NewShared(records.New(st, func() time.Time { return now }, records.ShardZeroIDs{}))
	ctx := context.Background()
	b.Run("admitted", func(b *testing.B) {
		for i := range b.N {
			if d, err := limits.Allow(ctx, "bench:"+strconv.Itoa(i), 100); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
	b.Run("leased", func(b *testing.B) {
		st.Take()
		for range b.N {
			if d, err := limits.Allow(ctx, "bench:leased", 1<<30); err != nil || !d.Allowed {
				b.Fatal(d, err)
			}
		}
		b.ReportMetric(float64(st.Take())/float64(b.N), "writes/op")
	})
	b.Run("refused", func(b *testing.B) {
		for range 2 {
			limits.Allow(ctx, "bench:full", 1)
		}
		b.ResetTimer()
		for range b.N {
			if d, err := limits.Allow(ctx, "bench:full", 1); err != nil || d.Allowed {
				b.Fatal(d, err)
			}
		}
	})
}
