package bolt

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"

	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/storetest"
)

// openTest opens a store that sweeps every sweep, closed when t ends.
func openTest(t testing.TB, path string, sweep time.Duration) *Store {
	t.Helper()
	s, err := open(path, sweep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		// Open creates missing directories.
		s, err := Open(filepath.Join(t.TempDir(), "a", "b", "tally.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			checkConsistent(t, s)
			if err := s.Close(); err != nil {
				t.Error(err)
			}
		})
		return s
	})
}

func TestReopen(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tally.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	it := store.Item{
		Key:       store.Key{PK: "p", SK: "s"},
		GSI2:      store.IndexKey{PK: "g", SK: "1"},
		Attrs:     map[string]string{"a": "b"},
		Nums:      map[string]int64{"n": math.MinInt64},
		Data:      []byte{0, 1, 0xff},
		ExpiresAt: time.Now().Add(time.Hour).Unix(),
	}
	if err := s.Transact(ctx, store.Put(it)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := s.Get(ctx, it.Key); err == nil {
		t.Error("Get after Close succeeded")
	}

	s = openTest(t, path, time.Hour)
	got, err := s.Get(ctx, it.Key)
	if err != nil || !slices.Equal(got.Data, it.Data) || got.Nums["n"] != math.MinInt64 || got.ExpiresAt != it.ExpiresAt {
		t.Errorf("after reopening: Get = %+v, %v; want %+v", got, err, it)
	}
	page, err := s.Query(ctx, store.Query{Index: store.GSI2, PK: "g"})
	if err != nil || len(page.Items) != 1 || page.Items[0].Key != it.Key {
		t.Errorf("after reopening: gsi2 query = %+v, %v", page, err)
	}
	checkConsistent(t, s)
}

func TestLocked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tally.db")
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = Open(path)
	if !errors.Is(err, ErrLocked) || !errors.Is(err, bberrors.ErrTimeout) {
		t.Errorf("second Open: got %v, want ErrLocked", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("second Open took %v", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	openTest(t, path, time.Hour) // the lock is gone with the first store
}

func TestSweep(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, filepath.Join(t.TempDir(), "tally.db"), time.Hour)
	now := time.Now().Unix()
	item := func(sk string, exp int64) store.Item {
		return store.Item{Key: store.Key{PK: "p", SK: sk}, GSI1: store.IndexKey{PK: "g", SK: sk}, ExpiresAt: exp}
	}
	ops := []store.Op{
		store.Put(item("expired", now-10)),
		store.Put(item("due", now)), // not yet in the past
		store.Put(item("future", now+3600)),
		store.Put(item("never", 0)),
		store.Put(item("negative", -5)),
		store.Put(item("replaced", now-10)),
		store.Put(item("updated", now+3600)),
	}
	if err := s.Transact(ctx, ops...); err != nil {
		t.Fatal(err)
	}
	// Replacing drops the TTL; an update can set an earlier one.
	if err := s.Transact(ctx,
		store.Put(item("replaced", 0)),
		store.Op{Kind: store.OpUpdate, Key: store.Key{PK: "p", SK: "updated"}, ExpiresAt: now - 1},
	); err != nil {
		t.Fatal(err)
	}
	if err := s.sweep(now); err != nil {
		t.Fatal(err)
	}
	wantSKs := []string{"due", "future", "negative", "never", "replaced"}
	for _, ix := range []store.Index{store.Table, store.GSI1} {
		pk := map[store.Index]string{store.Table: "p", store.GSI1: "g"}[ix]
		page, err := s.Query(ctx, store.Query{Index: ix, PK: pk})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, it := range page.Items {
			got = append(got, it.SK)
		}
		if !slices.Equal(got, wantSKs) {
			t.Errorf("%q after sweep: %q, want %q", ix, got, wantSKs)
		}
	}
	checkConsistent(t, s)

	// A backlog larger than one sweep batch goes in one sweep.
	var backlog []store.Op
	for i := range 2*sweepBatch + 5 {
		backlog = append(backlog, store.Put(store.Item{Key: store.Key{PK: "backlog", SK: fmt.Sprint(i)}, ExpiresAt: now - 1 - int64(i%7)}))
	}
	for chunk := range slices.Chunk(backlog, store.MaxTransactOps) {
		if err := s.Transact(ctx, chunk...); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.sweep(now); err != nil {
		t.Fatal(err)
	}
	if page, err := s.Query(ctx, store.Query{PK: "backlog"}); err != nil || len(page.Items) != 0 {
		t.Errorf("backlog after sweep: %d items, %v", len(page.Items), err)
	}
	checkConsistent(t, s)
}

func TestSweepLoop(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, filepath.Join(t.TempDir(), "tally.db"), 10*time.Millisecond)
	k := store.Key{PK: "p", SK: "s"}
	if err := s.Transact(ctx, store.Put(store.Item{Key: k, ExpiresAt: time.Now().Unix() - 1})); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := s.Get(ctx, k)
		if errors.Is(err, store.ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("expired item still there: %v", err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.done:
	default:
		t.Error("sweep still running after Close")
	}
}

// TestUpdateTypes covers DynamoDB's typing of attributes, which Update
// follows.
func TestUpdateTypes(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, filepath.Join(t.TempDir(), "tally.db"), time.Hour)
	k := store.Key{PK: "p", SK: "s"}
	it := store.Item{Key: k, Attrs: map[string]string{"s": "x"}, Nums: map[string]int64{"n": 1, "big": math.MaxInt64}}
	if err := s.Transact(ctx, store.Put(it)); err != nil {
		t.Fatal(err)
	}
	// SET replaces a number with a string.
	got, err := s.Update(ctx, store.Op{Kind: store.OpUpdate, Key: k, Set: map[string]string{"n": "one"}})
	if err != nil || got.Attrs["n"] != "one" || len(got.Nums) != 1 {
		t.Errorf("Set over a number: %+v, %v", got, err)
	}
	for _, add := range []map[string]int64{{"s": 1}, {"n": 1}, {"big": 1}, {"c": 1, "big": 1}} {
		if _, err := s.Update(ctx, store.Increment(k, add)); err == nil {
			t.Errorf("Add %v succeeded", add)
		}
	}
	got, err = s.Get(ctx, k)
	want := store.Item{Key: k, Attrs: map[string]string{"s": "x", "n": "one"}, Nums: map[string]int64{"big": math.MaxInt64}}
	if err != nil || !sameItem(got, want) {
		t.Errorf("after failed adds: %+v, %v; want %+v", got, err, want)
	}
}

// sameItem compares items by their printed form: fmt sorts map keys and
// prints nil and empty maps alike.
func sameItem(a, b store.Item) bool {
	return fmt.Sprint(a) == fmt.Sprint(b)
}

// TestRandomOps runs random transactions against a model and checks the
// items, the index query results and the bucket layout after each.
func TestRandomOps(t *testing.T) {
	ctx := t.Context()
	s := openTest(t, filepath.Join(t.TempDir(), "tally.db"), time.Hour)
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs ...string) string { return xs[rng.IntN(len(xs))] }
	indexKey := func() store.IndexKey {
		if rng.IntN(3) == 0 {
			return store.IndexKey{}
		}
		return store.IndexKey{PK: pick("g1", "g2"), SK: pick("a", "b", "c")}
	}
	now := time.Now().Unix()
	model := map[store.Key]store.Item{}
	for range 80 {
		var ops []store.Op
		used := map[store.Key]bool{}
		for range 1 + rng.IntN(4) {
			k := store.Key{PK: pick("p", "q"), SK: pick("1", "2", "3", "4")}
			if used[k] {
				continue
			}
			used[k] = true
			switch rng.IntN(3) {
			case 0:
				it := store.Item{
					Key: k, GSI1: indexKey(), GSI2: indexKey(), GSI3: indexKey(),
					Nums:      map[string]int64{"n": rng.Int64()},
					ExpiresAt: []int64{0, now + 100, now + 200}[rng.IntN(3)],
				}
				ops = append(ops, store.Put(it))
				model[k] = it
			case 1:
				op := store.Op{Kind: store.OpUpdate, Key: k, Set: map[string]string{"s": pick("x", "y")}, ExpiresAt: []int64{0, now + 300}[rng.IntN(2)]}
				ops = append(ops, op)
				it, ok := model[k]
				if !ok {
					it = store.Item{Key: k}
				}
				it.Attrs = map[string]string{"s": op.Set["s"]}
				if op.ExpiresAt != 0 {
					it.ExpiresAt = op.ExpiresAt
				}
				model[k] = it
			case 2:
				ops = append(ops, store.Delete(k))
				delete(model, k)
			}
		}
		if err := s.Transact(ctx, ops...); err != nil {
			t.Fatal(err)
		}
		checkConsistent(t, s)
	}
	for _, pk := range []string{"p", "q"} {
		for _, sk := range []string{"1", "2", "3", "4"} {
			k := store.Key{PK: pk, SK: sk}
			got, err := s.Get(ctx, k)
			want, ok := model[k]
			if !ok {
				if !errors.Is(err, store.ErrNotFound) {
					t.Errorf("Get(%v) = %+v, %v; want ErrNotFound", k, got, err)
				}
				continue
			}
			if err != nil || !sameItem(got, want) {
				t.Errorf("Get(%v) = %+v, %v; want %+v", k, got, err, want)
			}
		}
	}
	for _, ix := range store.Indexes {
		for _, g := range []string{"g1", "g2"} {
			var want []string
			for _, it := range model {
				if ik := it.IndexKey(ix); ik.PK == g {
					want = append(want, ik.SK+"/"+it.PK+"/"+it.SK)
				}
			}
			slices.Sort(want)
			page, err := s.Query(ctx, store.Query{Index: ix, PK: g})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, it := range page.Items {
				got = append(got, it.IndexKey(ix).SK+"/"+it.PK+"/"+it.SK)
			}
			if !slices.Equal(got, want) {
				t.Errorf("Query(%s, %s) = %q, want %q", ix, g, got, want)
			}
		}
	}
}

// checkConsistent fails unless the index and TTL buckets hold exactly the
// entries the items call for.
func checkConsistent(t *testing.T, s *Store) {
	t.Helper()
	want := map[string][]string{}
	got := map[string][]string{}
	err := s.db.View(func(tx *bbolt.Tx) error {
		err := tx.Bucket(itemsBucket).ForEach(func(k, v []byte) error {
			key, err := splitItemKey(k)
			if err != nil {
				return err
			}
			it, err := decode(key, v)
			if err != nil {
				return err
			}
			for _, ix := range store.Indexes {
				if ik := it.IndexKey(ix); ik.PK != "" {
					want[string(ix)] = append(want[string(ix)], string(indexEntry(ik, k)))
				}
			}
			if it.ExpiresAt > 0 {
				want["ttl"] = append(want["ttl"], string(ttlEntry(it.ExpiresAt, k)))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, name := range append(indexBuckets, ttlBucket) {
			err := tx.Bucket(name).ForEach(func(k, v []byte) error {
				if len(v) != 0 {
					return fmt.Errorf("%s entry %q has value %q", name, k, v)
				}
				got[string(name)] = append(got[string(name)], string(k))
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range append(indexBuckets, ttlBucket) {
		w, g := want[string(name)], got[string(name)]
		slices.SortFunc(w, strings.Compare)
		if !slices.Equal(w, g) {
			t.Errorf("bucket %s: entries %q, want %q", name, g, w)
		}
	}
}
