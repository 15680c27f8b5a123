package storetest

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// future is an expiry time no TTL sweep reaches during the suite.
var future = time.Now().Add(365 * 24 * time.Hour).Unix()

// fullItem returns an item with every field set, in partition pk(name).
func (e *env) fullItem(name, sk string) store.Item {
	data := make([]byte, 512)
	for i := range data {
		data[i] = byte(i) // every byte value, so not UTF-8
	}
	return store.Item{
		Key:  e.key(name, sk),
		GSI1: store.IndexKey{PK: e.pk("gsi1"), SK: "2024-05-01T10:00:00Z"},
		GSI2: store.IndexKey{PK: e.pk("gsi2"), SK: "b"},
		GSI3: store.IndexKey{PK: e.pk("gsi3"), SK: "c#" + sk},
		Attrs: map[string]string{
			"status":       "active",
			"empty":        "",
			"unicode":      "Grüße, 世界 🚀",
			"json":         `{"a":[1,2]}`,
			"conversionId": "cnv_1", // in store.IndexAttrs
		},
		Nums: map[string]int64{
			"lastUsedMs": 1_795_000_000_000, // in store.IndexAttrs
			"max":        math.MaxInt64,
			"min":        math.MinInt64,
			"odd":        1<<53 + 1, // not representable as float64
			"zero":       0,
			"neg":        -42,
		},
		Bins: map[string][]byte{
			"zipped": data[:300], // not UTF-8
			"one":    {0},
		},
		Data:      data,
		ExpiresAt: future,
	}
}

func testPutGet(t *testing.T, e *env) {
	full := e.fullItem("p", "full")
	bare := store.Item{Key: e.key("p", "bare")}
	want := clone(full)
	e.put(t, full, bare)

	// The store must not keep the caller's maps and slices.
	full.Attrs["status"] = "changed"
	full.Nums["max"] = 1
	full.Bins["one"][0] = 'x'
	full.Data[0] = 'x'
	e.wantItem(t, want)
	e.wantItem(t, bare)

	// Nor hand out its own.
	got := e.get(t, want.Key)
	got.Attrs["status"] = "changed"
	got.Nums["max"] = 1
	got.Bins["one"][0] = 'x'
	got.Data[0] = 'x'
	e.wantItem(t, want)

	// The full item is in all three indexes: gsi3 with all its fields,
	// gsi1 and gsi2 with its key, their own key, Data and store.IndexAttrs
	// only.
	for _, ix := range store.Indexes {
		items := e.query(t, store.Query{Index: ix, PK: want.IndexKey(ix).PK}).Items
		proj := want
		if ix != store.GSI3 {
			proj = store.Item{Key: want.Key, Data: want.Data,
				Attrs: map[string]string{"conversionId": "cnv_1"}, Nums: map[string]int64{"lastUsedMs": 1_795_000_000_000}}
			if ix == store.GSI1 {
				proj.GSI1 = want.GSI1
			} else {
				proj.GSI2 = want.GSI2
			}
		}
		if len(items) != 1 || !equal(items[0], proj) {
			t.Errorf("Query(%s) = %d items, want only %s", ix, len(items), show(proj))
		}
		if got := want.Projection(ix); !equal(got, proj) {
			t.Errorf("Projection(%s) = %s, want %s", ix, show(got), show(proj))
		}
	}
	wantSKs(t, "table partition", e.query(t, store.Query{PK: e.pk("p")}).Items, "bare", "full")

	// Keys as long as DynamoDB allows.
	long := e.pk("long")
	long += strings.Repeat("p", 2048-len(long))
	big := store.Item{
		Key:  store.Key{PK: long, SK: strings.Repeat("s", 1024)},
		GSI1: store.IndexKey{PK: long, SK: strings.Repeat("é", 512)},
	}
	e.put(t, big)
	e.wantItem(t, big)
	items := e.query(t, store.Query{Index: store.GSI1, PK: long, SKPrefix: big.GSI1.SK}).Items
	if len(items) != 1 || !equal(items[0], big) {
		t.Errorf("Query(gsi1) of long keys = %d items, want the one", len(items))
	}
}

func testPutReplaces(t *testing.T, e *env) {
	old := e.fullItem("p", "x")
	e.put(t, old)
	repl := store.Item{
		Key:   old.Key,
		GSI1:  store.IndexKey{PK: e.pk("gsi1-new"), SK: "1"},
		GSI3:  old.GSI3,
		Attrs: map[string]string{"other": "v"},
		Nums:  map[string]int64{"n": 7},
		Data:  []byte("new"),
	}
	e.put(t, repl)
	e.wantItem(t, repl)

	if n := len(e.query(t, store.Query{Index: store.GSI1, PK: old.GSI1.PK}).Items); n != 0 {
		t.Errorf("old gsi1 partition still has %d items", n)
	}
	if n := len(e.query(t, store.Query{Index: store.GSI2, PK: old.GSI2.PK}).Items); n != 0 {
		t.Errorf("dropped gsi2 key still has %d items", n)
	}
	for _, ix := range []store.Index{store.GSI1, store.GSI3} {
		items := e.query(t, store.Query{Index: ix, PK: repl.IndexKey(ix).PK}).Items
		if len(items) != 1 || !equal(items[0], repl.Projection(ix)) {
			t.Errorf("Query(%s) = %d items, want only %s", ix, len(items), show(repl.Projection(ix)))
		}
	}
}

func testGetMissing(t *testing.T, e *env) {
	e.put(t, store.Item{Key: e.key("p", "a")})
	e.wantMissing(t, e.key("p", "b"))
	e.wantMissing(t, e.key("p", "a#"))
	e.wantMissing(t, e.key("other", "a"))
}

func testDelete(t *testing.T, e *env) {
	it := e.fullItem("p", "x")
	keep := e.fullItem("p", "y")
	e.put(t, it, keep)
	e.transact(t, store.Delete(it.Key))
	e.wantMissing(t, it.Key)
	e.wantItem(t, keep)
	wantSKs(t, "table after delete", e.query(t, store.Query{PK: e.pk("p")}).Items, "y")
	for _, ix := range store.Indexes {
		wantSKs(t, string(ix)+" after delete", e.query(t, store.Query{Index: ix, PK: it.IndexKey(ix).PK}).Items, "y")
	}
	// Deleting an absent item is no error.
	e.transact(t, store.Delete(it.Key))
	e.transact(t, store.Delete(e.key("never", "x")))
}

func testUpdate(t *testing.T, e *env) {
	k := e.key("p", "counter")
	got, err := e.s.Update(e.ctx, store.Op{
		Kind:      store.OpUpdate,
		Key:       k,
		Set:       map[string]string{"status": "new"},
		Add:       map[string]int64{"n": 5, "m": -2},
		ExpiresAt: future,
	})
	if err != nil {
		t.Fatalf("Update creating: %v", err)
	}
	want := store.Item{
		Key:       k,
		Attrs:     map[string]string{"status": "new"},
		Nums:      map[string]int64{"n": 5, "m": -2},
		ExpiresAt: future,
	}
	if !equal(got, want) {
		t.Errorf("Update creating returned\n %s\nwant %s", show(got), show(want))
	}
	e.wantItem(t, want)

	// The returned item is the caller's to change.
	got.Nums["n"] = 100
	got.Attrs["status"] = "changed"
	e.wantItem(t, want)

	steps := []struct {
		op   store.Op
		want func(*store.Item)
	}{
		{store.Increment(k, map[string]int64{"n": 3}), func(it *store.Item) { it.Nums["n"] = 8 }},
		{store.Increment(k, map[string]int64{"n": -10, "new": 1}), func(it *store.Item) { it.Nums["n"] = -2; it.Nums["new"] = 1 }},
		{store.Op{Kind: store.OpUpdate, Key: k, Set: map[string]string{"status": "paused", "x": "y"}}, func(it *store.Item) {
			it.Attrs["status"] = "paused"
			it.Attrs["x"] = "y"
		}},
		{store.Op{Kind: store.OpUpdate, Key: k, ExpiresAt: future + 60}, func(it *store.Item) { it.ExpiresAt = future + 60 }},
		{store.Increment(k, map[string]int64{"big": math.MaxInt64 - 10}), func(it *store.Item) { it.Nums["big"] = math.MaxInt64 - 10 }},
		{store.Increment(k, map[string]int64{"big": 5}), func(it *store.Item) { it.Nums["big"] = math.MaxInt64 - 5 }},
	}
	for i, st := range steps {
		st.want(&want)
		got, err := e.s.Update(e.ctx, st.op)
		if err != nil {
			t.Fatalf("step %d: Update: %v", i, err)
		}
		if !equal(got, want) {
			t.Errorf("step %d: Update returned\n %s\nwant %s", i, show(got), show(want))
		}
	}
	e.wantItem(t, want)

	// Increment in a transaction creates the item too.
	k2 := e.key("p", "created")
	e.transact(t, store.Increment(k2, map[string]int64{"n": 1}))
	e.wantItem(t, store.Item{Key: k2, Nums: map[string]int64{"n": 1}})

	// Update takes only updates.
	for _, op := range []store.Op{
		store.Put(store.Item{Key: e.key("p", "put")}),
		store.Delete(k),
		store.Check(k),
	} {
		_, err := e.s.Update(e.ctx, op)
		wantRejected(t, "Update with op kind "+kindName(op.Kind), err)
	}
	e.wantMissing(t, e.key("p", "put"))
	e.wantItem(t, want)
}

func testUpdateKeepsItem(t *testing.T, e *env) {
	it := e.fullItem("p", "x")
	e.put(t, it)
	got, err := e.s.Update(e.ctx, store.Op{
		Kind: store.OpUpdate,
		Key:  it.Key,
		Set:  map[string]string{"status": "paused"},
		Add:  map[string]int64{"neg": 2, "clicks": 1},
	})
	if err != nil {
		t.Fatalf("Update: %v", err)
	}
	want := clone(it)
	want.Attrs["status"] = "paused"
	want.Nums["neg"] = -40
	want.Nums["clicks"] = 1
	if !equal(got, want) {
		t.Errorf("Update returned\n %s\nwant %s", show(got), show(want))
	}
	e.wantItem(t, want)
	for _, ix := range store.Indexes {
		items := e.query(t, store.Query{Index: ix, PK: it.IndexKey(ix).PK}).Items
		if len(items) != 1 || !equal(items[0], want.Projection(ix)) {
			t.Errorf("Query(%s) after update = %d items, want only %s", ix, len(items), show(want.Projection(ix)))
		}
	}

	// A string set in place of bytes replaces them; adding to bytes fails.
	if _, err := e.s.Update(e.ctx, store.Increment(it.Key, map[string]int64{"zipped": 1})); err == nil {
		t.Error("Update adding to a binary attribute succeeded")
	}
	e.wantItem(t, want)
	got, err = e.s.Update(e.ctx, store.Op{Kind: store.OpUpdate, Key: it.Key, Set: map[string]string{"one": "1"}})
	if err != nil {
		t.Fatalf("Update setting a binary attribute's name: %v", err)
	}
	want.Attrs["one"] = "1"
	delete(want.Bins, "one")
	if !equal(got, want) {
		t.Errorf("Update returned\n %s\nwant %s", show(got), show(want))
	}
	e.wantItem(t, want)
}

func testCanceled(t *testing.T, e *env) {
	k := e.key("p", "x")
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	if _, err := e.s.Get(ctx, k); !errors.Is(err, context.Canceled) {
		t.Errorf("Get: got %v, want context.Canceled", err)
	}
	if _, err := e.s.Query(ctx, store.Query{PK: k.PK}); !errors.Is(err, context.Canceled) {
		t.Errorf("Query: got %v, want context.Canceled", err)
	}
	if err := e.s.Transact(ctx, store.Put(store.Item{Key: k})); !errors.Is(err, context.Canceled) {
		t.Errorf("Transact: got %v, want context.Canceled", err)
	}
	if _, err := e.s.Update(ctx, store.Increment(k, map[string]int64{"n": 1})); !errors.Is(err, context.Canceled) {
		t.Errorf("Update: got %v, want context.Canceled", err)
	}
	e.wantMissing(t, k)
}

func kindName(k store.OpKind) string {
	switch k {
	case store.OpPut:
		return "put"
	case store.OpUpdate:
		return "update"
	case store.OpDelete:
		return "delete"
	case store.OpCheck:
		return "check"
	}
	return "unknown"
}
