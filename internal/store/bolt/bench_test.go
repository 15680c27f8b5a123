package bolt

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// clickOps returns the operations of tracked click i: the click record put
// once only, a check that its campaign is live, and four counters (one
// capped). Open the store with newClickStore.
func clickOps(i int64) []store.Op {
	click := fmt.Sprintf("click#%012d", i)
	return []store.Op{
		store.Put(store.Item{
			Key:       store.Key{PK: click, SK: "click"},
			GSI1:      store.IndexKey{PK: "campaign#c1#2024-05-01", SK: click},
			GSI2:      store.IndexKey{PK: "aff#a1#2024-05-01", SK: click},
			Attrs:     map[string]string{"status": "new"},
			Data:      clickBody,
			ExpiresAt: clickExpires,
		}, store.NotExists()),
		store.Check(campaign, store.AttrEquals("status", "active")),
		store.Increment(store.Key{PK: "campaign#c1", SK: "stats#2024-05-01"}, map[string]int64{"clicks": 1}),
		store.Increment(store.Key{PK: "offer#o1", SK: "stats#2024-05-01"}, map[string]int64{"clicks": 1}),
		store.Increment(store.Key{PK: "aff#a1", SK: "stats#2024-05-01"}, map[string]int64{"clicks": 1}),
		store.Increment(store.Key{PK: "campaign#c1", SK: "cap#2024-05-01"}, map[string]int64{"clicks": 1}, store.NumLess("clicks", 1<<40)),
	}
}

var (
	campaign     = store.Key{PK: "campaign#c1", SK: "meta"}
	clickBody    = bytes.Repeat([]byte("x"), 400) // a click's JSON record
	clickExpires = time.Now().Add(90 * 24 * time.Hour).Unix()
)

func newClickStore(b *testing.B) *Store {
	s := openTest(b, filepath.Join(b.TempDir(), "tally.db"), time.Hour)
	campaignItem := store.Item{Key: campaign, Attrs: map[string]string{"status": "active"}, Data: bytes.Repeat([]byte("y"), 600)}
	if err := s.Transact(b.Context(), store.Put(campaignItem)); err != nil {
		b.Fatal(err)
	}
	if err := s.Transact(b.Context(), clickOps(0)...); err != nil { // the counters exist
		b.Fatal(err)
	}
	return s
}

// BenchmarkTransact measures the transaction of a tracked click (clickOps).
// Every iteration commits, and so fsyncs, once.
func BenchmarkTransact(b *testing.B) {
	s := newClickStore(b)
	ctx := b.Context()
	var n atomic.Int64
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			if err := s.Transact(ctx, clickOps(n.Add(1))...); err != nil {
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
				if err := s.Transact(ctx, clickOps(n.Add(1))...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := s.Transact(ctx, clickOps(n.Add(1))...); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkApply measures what the committer does for each write of a
// round before the commit: prepare (done by the writer), then plan and
// perform in the round's overlay, and the overlay's flush into the
// round's transaction. One transaction holds 32 clicks, as a
// round under a load of 64 connections does, and is rolled back, so that no
// fsync hides the CPU time.
func BenchmarkApply(b *testing.B) {
	s := newClickStore(b)
	var n int64
	b.ReportAllocs()
	for b.Loop() {
		var steps [32][]step
		for i := range steps {
			n++
			var err error
			if steps[i], err = prepare(clickOps(n)); err != nil {
				b.Fatal(err)
			}
		}
		errRollback := errors.New("rollback")
		err := s.db.Update(func(tx *bbolt.Tx) error {
			r := newRound(tx)
			for _, st := range steps {
				if err := r.plan(st); err != nil {
					return err
				}
				r.perform(st)
			}
			if err := r.flush(); err != nil {
				return err
			}
			return errRollback
		})
		if err != errRollback {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/write")
}
