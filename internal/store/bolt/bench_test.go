package bolt

import (
	"bytes"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// BenchmarkTransact measures the transaction of a tracked click: the click
// record put once only, a check that its campaign is live, and four counters
// (one capped). Every iteration commits, and so fsyncs, once.
func BenchmarkTransact(b *testing.B) {
	s := openTest(b, filepath.Join(b.TempDir(), "tally.db"), time.Hour)
	ctx := b.Context()
	campaign := store.Key{PK: "campaign#c1", SK: "meta"}
	if err := s.Transact(ctx, store.Put(store.Item{Key: campaign, Attrs: map[string]string{"status": "active"}})); err != nil {
		b.Fatal(err)
	}
	body := bytes.Repeat([]byte("x"), 400) // a click's JSON record
	expires := time.Now().Add(90 * 24 * time.Hour).Unix()
	ops := func(i int64) []store.Op {
		click := fmt.Sprintf("click#%012d", i)
		return []store.Op{
			store.Put(store.Item{
				Key:       store.Key{PK: click, SK: "click"},
				GSI1:      store.IndexKey{PK: "campaign#c1#2024-05-01", SK: click},
				GSI2:      store.IndexKey{PK: "aff#a1#2024-05-01", SK: click},
				Attrs:     map[string]string{"status": "new"},
				Data:      body,
				ExpiresAt: expires,
			}, store.NotExists()),
			store.Check(campaign, store.AttrEquals("status", "active")),
			store.Increment(store.Key{PK: "campaign#c1", SK: "stats#2024-05-01"}, map[string]int64{"clicks": 1}),
			store.Increment(store.Key{PK: "offer#o1", SK: "stats#2024-05-01"}, map[string]int64{"clicks": 1}),
			store.Increment(store.Key{PK: "aff#a1", SK: "stats#2024-05-01"}, map[string]int64{"clicks": 1}),
			store.Increment(store.Key{PK: "campaign#c1", SK: "cap#2024-05-01"}, map[string]int64{"clicks": 1}, store.NumLess("clicks", 1<<40)),
		}
	}
	var n atomic.Int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := s.Transact(ctx, ops(n.Add(1))...); err != nil {
				b.Fatal(err)
			}
		}
	})
	// 64 writers, as 64 connections of a load test: how well they share
	// commits.
	b.Run("writers=64", func(b *testing.B) {
		b.SetParallelism(max(64/runtime.GOMAXPROCS(0), 1))
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Transact(ctx, ops(n.Add(1))...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Transact(ctx, ops(n.Add(1))...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}
