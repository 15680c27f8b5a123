package storetest

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/store"
)

func testConditions(t *testing.T, e *env) {
	// The item that "present" cases start with.
	base := func(k store.Key) store.Item {
		return store.Item{Key: k, Attrs: map[string]string{"status": "active"}, Nums: map[string]int64{"n": 5}, Bins: map[string][]byte{"b": []byte("5")}}
	}
	cases := []struct {
		name    string
		present bool
		conds   []store.Cond
		holds   bool
	}{
		{"Exists/present", true, []store.Cond{store.Exists()}, true},
		{"Exists/absent", false, []store.Cond{store.Exists()}, false},
		{"NotExists/present", true, []store.Cond{store.NotExists()}, false},
		{"NotExists/absent", false, []store.Cond{store.NotExists()}, true},
		{"AttrEquals/equal", true, []store.Cond{store.AttrEquals("status", "active")}, true},
		{"AttrEquals/different", true, []store.Cond{store.AttrEquals("status", "paused")}, false},
		{"AttrEquals/missing attr vs empty", true, []store.Cond{store.AttrEquals("other", "")}, false},
		{"AttrEquals/number attr", true, []store.Cond{store.AttrEquals("n", "5")}, false},
		{"AttrEquals/binary attr", true, []store.Cond{store.AttrEquals("b", "5")}, false},
		{"AttrEquals/absent item", false, []store.Cond{store.AttrEquals("status", "active")}, false},
		{"NumLess/less", true, []store.Cond{store.NumLess("n", 6)}, true},
		{"NumLess/equal", true, []store.Cond{store.NumLess("n", 5)}, false},
		{"NumLess/missing attr under 1", true, []store.Cond{store.NumLess("m", 1)}, true},
		{"NumLess/missing attr under 0", true, []store.Cond{store.NumLess("m", 0)}, false},
		{"NumLess/string attr", true, []store.Cond{store.NumLess("status", 10)}, false},
		{"NumLess/binary attr", true, []store.Cond{store.NumLess("b", 10)}, false},
		{"NumEquals/binary attr", true, []store.Cond{store.NumEquals("b", 0)}, false},
		{"NumLess/absent item under 1", false, []store.Cond{store.NumLess("n", 1)}, true},
		{"NumLess/absent item under 0", false, []store.Cond{store.NumLess("n", 0)}, false},
		{"NumLess/absent item under -1", false, []store.Cond{store.NumLess("n", -1)}, false},
		{"NumEquals/equal", true, []store.Cond{store.NumEquals("n", 5)}, true},
		{"NumEquals/different", true, []store.Cond{store.NumEquals("n", 4)}, false},
		{"NumEquals/missing attr 0", true, []store.Cond{store.NumEquals("m", 0)}, true},
		{"NumEquals/missing attr 1", true, []store.Cond{store.NumEquals("m", 1)}, false},
		{"NumEquals/absent item 0", false, []store.Cond{store.NumEquals("n", 0)}, true},
		{"NumEquals/absent item 5", false, []store.Cond{store.NumEquals("n", 5)}, false},
		{"All/hold", true, []store.Cond{store.Exists(), store.AttrEquals("status", "active"), store.NumLess("n", 10), store.NumEquals("n", 5)}, true},
		{"All/last fails", true, []store.Cond{store.Exists(), store.AttrEquals("status", "active"), store.NumLess("n", 5)}, false},
		{"All/absent hold", false, []store.Cond{store.NotExists(), store.NumEquals("n", 0), store.NumLess("n", 1)}, true},
	}
	// "Update" is the Update method, the others are Transact operations.
	kinds := []string{"put", "update", "Update", "delete", "check"}

	var setup []store.Item
	for _, c := range cases {
		if c.present {
			for _, kind := range kinds {
				setup = append(setup, base(e.key(c.name, kind)))
			}
		}
	}
	e.put(t, setup...)

	for _, c := range cases {
		for _, kind := range kinds {
			t.Run(c.name+"/"+kind, func(t *testing.T) {
				k := e.key(c.name, kind)
				before := store.Item{Key: k} // as Update finds it
				if c.present {
					before = base(k)
				}
				update := store.Op{
					Kind:  store.OpUpdate,
					Key:   k,
					Set:   map[string]string{"touched": "yes"},
					Add:   map[string]int64{"n": 1},
					Conds: c.conds,
				}
				updated := clone(before)
				if updated.Attrs == nil {
					updated.Attrs = map[string]string{}
				}
				if updated.Nums == nil {
					updated.Nums = map[string]int64{}
				}
				updated.Attrs["touched"] = "yes"
				updated.Nums["n"]++

				var err error
				want, gone := updated, false
				switch kind {
				case "put":
					want = store.Item{Key: k, Attrs: map[string]string{"status": "replaced"}}
					err = e.s.Transact(e.ctx, store.Put(want, c.conds...))
				case "update":
					err = e.s.Transact(e.ctx, update)
				case "Update":
					var got store.Item
					got, err = e.s.Update(e.ctx, update)
					if err == nil && !equal(got, updated) {
						t.Errorf("Update returned %s, want %s", show(got), show(updated))
					}
				case "delete":
					gone = true
					err = e.s.Transact(e.ctx, store.Delete(k, c.conds...))
				case "check":
					want, gone = before, !c.present
					err = e.s.Transact(e.ctx, store.Check(k, c.conds...))
				}
				if !c.holds {
					wantCondFailed(t, kind, err, 0)
					want, gone = before, !c.present
				} else if err != nil {
					t.Fatalf("%s: %v", kind, err)
				}
				if gone {
					e.wantMissing(t, k)
				} else {
					e.wantItem(t, want)
				}
			})
		}
	}
}

func testFailedOpIndex(t *testing.T, e *env) {
	present := store.Item{Key: e.key("p", "present"), Attrs: map[string]string{"s": "x"}, Nums: map[string]int64{"n": 1}}
	e.put(t, present)
	absent := e.key("p", "absent")
	fresh := func(i int) store.Item { return store.Item{Key: e.key("new", fmt.Sprint(i))} }

	ten := make([]store.Op, 10)
	for i := range 9 {
		ten[i] = store.Put(fresh(i), store.NotExists())
	}
	ten[9] = store.Check(present.Key, store.AttrEquals("s", "y"))

	tests := []struct {
		name  string
		ops   []store.Op
		index int
	}{
		{"third", []store.Op{
			store.Check(present.Key, store.Exists()),
			store.Put(fresh(0)),
			store.Increment(e.key("p", "counter"), map[string]int64{"n": 1}, store.NumLess("n", 0)),
			store.Delete(absent, store.Exists()),
		}, 2},
		{"first of two", []store.Op{
			store.Put(fresh(0), store.NotExists()),
			store.Check(absent, store.Exists()),
			store.Check(present.Key, store.NotExists()),
		}, 1},
		{"first", []store.Op{
			store.Delete(present.Key, store.NumEquals("n", 2)),
			store.Put(fresh(0)),
		}, 0},
		{"tenth", ten, 9},
	}
	for _, tc := range tests {
		err := e.s.Transact(e.ctx, tc.ops...)
		wantCondFailed(t, tc.name, err, tc.index)
	}
	e.wantItem(t, present)
	e.wantMissing(t, e.key("p", "counter"))
	if items := e.query(t, store.Query{PK: e.pk("new")}).Items; len(items) != 0 {
		t.Errorf("failed transactions wrote %q", sks(items))
	}
}

func testAtomicity(t *testing.T, e *env) {
	g := e.pk("g")
	doomed := store.Item{Key: e.key("p", "doomed"), GSI1: store.IndexKey{PK: g, SK: "doomed"}}
	counter := store.Item{Key: e.key("p", "counter"), Nums: map[string]int64{"n": 1}}
	taken := store.Item{Key: e.key("p", "taken"), Data: []byte("original")}
	e.put(t, doomed, counter, taken)
	fresh := store.Item{Key: e.key("p", "fresh"), GSI1: store.IndexKey{PK: g, SK: "fresh"}, Data: []byte("fresh")}
	created := e.key("p", "created")

	unchanged := func(what string) {
		t.Helper()
		e.wantItem(t, doomed)
		e.wantItem(t, counter)
		e.wantItem(t, taken)
		e.wantMissing(t, fresh.Key)
		e.wantMissing(t, created)
		wantSKs(t, what+": gsi1", e.query(t, store.Query{Index: store.GSI1, PK: g}).Items, "doomed")
	}

	// The last operation fails: the earlier ones must not apply.
	err := e.s.Transact(e.ctx,
		store.Put(fresh),
		store.Increment(counter.Key, map[string]int64{"n": 1}),
		store.Delete(doomed.Key),
		store.Op{Kind: store.OpUpdate, Key: created, Set: map[string]string{"a": "b"}},
		store.Put(store.Item{Key: taken.Key, Data: []byte("stolen")}, store.NotExists()),
	)
	wantCondFailed(t, "last fails", err, 4)
	unchanged("last fails")

	// The first fails.
	err = e.s.Transact(e.ctx,
		store.Check(taken.Key, store.NotExists()),
		store.Put(fresh),
		store.Increment(counter.Key, map[string]int64{"n": 1}),
		store.Delete(doomed.Key),
	)
	wantCondFailed(t, "first fails", err, 0)
	unchanged("first fails")

	// All hold: everything applies.
	e.transact(t,
		store.Put(fresh, store.NotExists()),
		store.Increment(counter.Key, map[string]int64{"n": 1}, store.NumEquals("n", 1)),
		store.Delete(doomed.Key, store.Exists()),
		store.Check(taken.Key, store.Exists()),
		store.Op{Kind: store.OpUpdate, Key: created, Set: map[string]string{"a": "b"}, Conds: []store.Cond{store.NotExists()}},
	)
	e.wantItem(t, fresh)
	e.wantItem(t, store.Item{Key: counter.Key, Nums: map[string]int64{"n": 2}})
	e.wantMissing(t, doomed.Key)
	e.wantItem(t, taken)
	e.wantItem(t, store.Item{Key: created, Attrs: map[string]string{"a": "b"}})
	wantSKs(t, "applied: gsi1", e.query(t, store.Query{Index: store.GSI1, PK: g}).Items, "fresh")
}

func testInvalid(t *testing.T, e *env) {
	k := e.key("p", "k")
	item := store.Item{Key: k}
	type invalid struct {
		name string
		ops  []store.Op
	}
	cases := []invalid{
		{"no ops", nil},
		{"put and update of one key", []store.Op{store.Put(item), store.Increment(k, map[string]int64{"n": 1})}},
		{"check and delete of one key", []store.Op{store.Check(k, store.NotExists()), store.Delete(k)}},
		{"update that changes nothing", []store.Op{{Kind: store.OpUpdate, Key: k, Conds: []store.Cond{store.NotExists()}}}},
		{"check without conditions", []store.Op{store.Check(k)}},
		{"partition key over 2048 bytes", []store.Op{store.Put(store.Item{Key: store.Key{PK: k.PK + strings.Repeat("x", 2049-len(k.PK)), SK: "s"}})}},
		{"sort key over 1024 bytes", []store.Op{store.Put(store.Item{Key: store.Key{PK: k.PK, SK: strings.Repeat("x", 1025)}})}},
		{"index partition key over 2048 bytes", []store.Op{store.Put(store.Item{Key: k, GSI1: store.IndexKey{PK: strings.Repeat("x", 2049), SK: "s"}})}},
		{"index sort key over 1024 bytes", []store.Op{store.Put(store.Item{Key: k, GSI2: store.IndexKey{PK: e.pk("g"), SK: strings.Repeat("x", 1025)}})}},
		{"two puts of one key", []store.Op{store.Put(item), store.Put(store.Item{Key: k, Data: []byte("x")})}},
		{"valid then invalid", []store.Op{store.Put(item), store.Put(store.Item{Key: store.Key{PK: k.PK}})}},
		{"unknown op kind", []store.Op{{Key: k}}},
		{"unknown condition kind", []store.Op{store.Put(item, store.Cond{})}},
		{"attr and num of one name", []store.Op{store.Put(store.Item{Key: k, Attrs: map[string]string{"x": "1"}, Nums: map[string]int64{"x": 1}})}},
		{"bin and attr of one name", []store.Op{store.Put(store.Item{Key: k, Attrs: map[string]string{"x": "1"}, Bins: map[string][]byte{"x": {1}}})}},
		{"bin and num of one name", []store.Op{store.Put(store.Item{Key: k, Nums: map[string]int64{"x": 1}, Bins: map[string][]byte{"x": {1}}})}},
		{"empty bin name", []store.Op{store.Put(store.Item{Key: k, Bins: map[string][]byte{"": {1}}})}},
		{"empty bin value", []store.Op{store.Put(store.Item{Key: k, Bins: map[string][]byte{"b": {}}})}},
		{"bin name not UTF-8", []store.Op{store.Put(store.Item{Key: k, Bins: map[string][]byte{"\xff": {1}}})}},
		{"set and add of one name", []store.Op{{Kind: store.OpUpdate, Key: k, Set: map[string]string{"x": "1"}, Add: map[string]int64{"x": 1}}}},
		{"empty attr name", []store.Op{store.Put(store.Item{Key: k, Attrs: map[string]string{"": "v"}})}},
		{"empty num name", []store.Op{store.Put(store.Item{Key: k, Nums: map[string]int64{"": 1}})}},
		{"empty set name", []store.Op{{Kind: store.OpUpdate, Key: k, Set: map[string]string{"": "v"}}}},
		{"empty add name", []store.Op{store.Increment(k, map[string]int64{"": 1})}},
		{"empty condition attr", []store.Op{store.Put(item, store.NumLess("", 1))}},
		{"index key without sort key", []store.Op{store.Put(store.Item{Key: k, GSI1: store.IndexKey{PK: e.pk("g")}})}},
		{"index key without partition key", []store.Op{store.Put(store.Item{Key: k, GSI2: store.IndexKey{SK: "s"}})}},
		{"index partition key with 0x00", []store.Op{store.Put(store.Item{Key: k, GSI1: store.IndexKey{PK: e.pk("g\x00"), SK: "s"}})}},
		{"index sort key of 0x00", []store.Op{store.Put(store.Item{Key: k, GSI3: store.IndexKey{PK: e.pk("g"), SK: "\x00"}})}},
		{"index sort key not UTF-8", []store.Op{store.Put(store.Item{Key: k, GSI2: store.IndexKey{PK: e.pk("g"), SK: "\xc3"}})}},
		{"attr value not UTF-8", []store.Op{store.Put(store.Item{Key: k, Attrs: map[string]string{"a": "\xff"}})}},
		{"num name not UTF-8", []store.Op{store.Put(store.Item{Key: k, Nums: map[string]int64{"\xff": 1}})}},
		{"set value not UTF-8", []store.Op{{Kind: store.OpUpdate, Key: k, Set: map[string]string{"a": "\xfe"}}}},
		{"condition value not UTF-8", []store.Op{store.Put(item, store.AttrEquals("a", "\xff"))}},
	}
	for _, bad := range []store.Key{
		{PK: "", SK: "s"}, {PK: k.PK, SK: ""}, {},
		{PK: k.PK + "\x00q", SK: "s"}, {PK: k.PK, SK: "s\x00"},
		{PK: k.PK + "\xff", SK: "s"}, {PK: k.PK, SK: "\xc3"},
	} {
		name := fmt.Sprintf("key %q/%q", bad.PK, bad.SK)
		cases = append(cases,
			invalid{"put " + name, []store.Op{store.Put(store.Item{Key: bad})}},
			invalid{"update " + name, []store.Op{store.Increment(bad, map[string]int64{"n": 1})}},
			invalid{"delete " + name, []store.Op{store.Delete(bad)}},
			invalid{"check " + name, []store.Op{store.Check(bad, store.Exists())}},
		)
		_, err := e.s.Get(e.ctx, bad)
		wantRejected(t, "Get: "+name, err)
	}
	for _, name := range store.Reserved {
		cases = append(cases,
			invalid{"attr " + name, []store.Op{store.Put(store.Item{Key: k, Attrs: map[string]string{name: "v"}})}},
			invalid{"num " + name, []store.Op{store.Put(store.Item{Key: k, Nums: map[string]int64{name: 1}})}},
			invalid{"bin " + name, []store.Op{store.Put(store.Item{Key: k, Bins: map[string][]byte{name: {1}}})}},
			invalid{"set " + name, []store.Op{{Kind: store.OpUpdate, Key: k, Set: map[string]string{name: "v"}}}},
			invalid{"add " + name, []store.Op{store.Increment(k, map[string]int64{name: 1})}},
			invalid{"condition on " + name, []store.Op{store.Put(item, store.AttrEquals(name, "v"))}},
			invalid{"numeric condition on " + name, []store.Op{store.Check(k, store.NumLess(name, 1))}},
		)
	}
	for _, c := range cases {
		wantRejected(t, "Transact: "+c.name, e.s.Transact(e.ctx, c.ops...))
		if len(c.ops) == 1 && c.ops[0].Kind == store.OpUpdate {
			_, err := e.s.Update(e.ctx, c.ops[0])
			wantRejected(t, "Update: "+c.name, err)
		}
	}
	e.wantMissing(t, k)
}

func testMaxTransactOps(t *testing.T, e *env) {
	ops := make([]store.Op, store.MaxTransactOps+1)
	for i := range ops {
		ops[i] = store.Put(store.Item{Key: e.key("p", fmt.Sprintf("%03d", i))}, store.NotExists())
	}
	wantRejected(t, "too many ops", e.s.Transact(e.ctx, ops...))
	if n := len(e.query(t, store.Query{PK: e.pk("p")}).Items); n != 0 {
		t.Fatalf("rejected transaction wrote %d items", n)
	}
	e.transact(t, ops[:store.MaxTransactOps]...)
	page := e.query(t, store.Query{PK: e.pk("p"), Limit: 1000})
	if len(page.Items) != store.MaxTransactOps || page.Items[0].SK != "000" || page.Items[store.MaxTransactOps-1].SK != "099" {
		t.Errorf("got %d items, want the %d written", len(page.Items), store.MaxTransactOps)
	}
}
