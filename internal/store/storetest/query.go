package storetest

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/store"
)

func testQuery(t *testing.T, e *env) {
	p := e.pk("q")
	// Sort keys in byte order: digits < upper case < lower case < '~' <
	// multi-byte UTF-8.
	all := []string{"10", "9", "B", "a", "a#1", "a#10", "a#2", "b", "b#1", "c", "z", "~", "é"}
	var items []store.Item
	for i, sk := range all {
		items = append(items, store.Item{Key: store.Key{PK: p, SK: sk}, Nums: map[string]int64{"i": int64(i)}, Data: []byte(sk)})
		// Neighbouring partitions that share a prefix with p, or that p
		// is a prefix of.
		for _, other := range []string{p + "0", p + "#", p[:len(p)-1]} {
			items = append(items, store.Item{Key: store.Key{PK: other, SK: sk}})
		}
	}
	e.put(t, items...)

	rev := slices.Clone(all)
	slices.Reverse(rev)
	tests := []struct {
		q    store.Query
		want []string
	}{
		{store.Query{}, all},
		{store.Query{Desc: true}, rev},
		{store.Query{SKPrefix: "a"}, []string{"a", "a#1", "a#10", "a#2"}},
		{store.Query{SKPrefix: "a#"}, []string{"a#1", "a#10", "a#2"}},
		{store.Query{SKPrefix: "a#1"}, []string{"a#1", "a#10"}},
		{store.Query{SKPrefix: "a#1", Desc: true}, []string{"a#10", "a#1"}},
		{store.Query{SKPrefix: "a", Desc: true}, []string{"a#2", "a#10", "a#1", "a"}},
		{store.Query{SKPrefix: "é"}, []string{"é"}},
		{store.Query{SKPrefix: "~"}, []string{"~"}},
		{store.Query{SKPrefix: "x"}, nil},
		{store.Query{SKPrefix: "a#3"}, nil},
		{store.Query{SKFrom: "a#10", SKTo: "b"}, []string{"a#10", "a#2", "b"}},
		{store.Query{SKFrom: "a#10", SKTo: "b", Desc: true}, []string{"b", "a#2", "a#10"}},
		{store.Query{SKFrom: "a#11", SKTo: "b#"}, []string{"a#2", "b"}},
		{store.Query{SKFrom: "a", SKTo: "a"}, []string{"a"}},
		{store.Query{SKFrom: "a#3", SKTo: "a#9"}, nil},
		{store.Query{SKFrom: "0", SKTo: "A"}, []string{"10", "9"}},
		{store.Query{SKFrom: "b"}, []string{"b", "b#1", "c", "z", "~", "é"}},
		{store.Query{SKFrom: "b", Desc: true}, []string{"é", "~", "z", "c", "b#1", "b"}},
		{store.Query{SKFrom: "zz"}, []string{"~", "é"}},
		{store.Query{SKTo: "B"}, []string{"10", "9", "B"}},
		{store.Query{SKTo: "B", Desc: true}, []string{"B", "9", "10"}},
		{store.Query{SKTo: "0"}, nil},
		{store.Query{Limit: 3}, all[:3]},
		{store.Query{Limit: 3, Desc: true}, rev[:3]},
		{store.Query{SKPrefix: "a", Limit: 1}, []string{"a"}},
		{store.Query{SKFrom: "a#10", SKTo: "c", Limit: 2, Desc: true}, []string{"c", "b#1"}},
	}
	for _, tc := range tests {
		q := tc.q
		q.PK = p
		page := e.query(t, q)
		what := fmt.Sprintf("Query(%+v)", tc.q)
		wantSKs(t, what, page.Items, tc.want...)
		if q.Limit == 0 && page.Cursor != "" {
			t.Errorf("%s: cursor %q after the last item", what, page.Cursor)
		}
		if q.Limit > 0 && page.Cursor == "" {
			t.Errorf("%s: no cursor though more items follow", what)
		}
		for _, it := range page.Items {
			i := slices.Index(all, it.SK)
			want := store.Item{Key: it.Key, Nums: map[string]int64{"i": int64(i)}, Data: []byte(it.SK)}
			if it.PK != p || !equal(it, want) {
				t.Errorf("%s: got %s, want %s", what, show(it), show(want))
			}
		}
	}

	// A page that takes exactly the last items may carry a cursor (as
	// DynamoDB's does), but the page after it is then empty and final.
	for _, desc := range []bool{false, true} {
		q := store.Query{PK: p, SKPrefix: "a#", Limit: 3, Desc: desc}
		page := e.query(t, q)
		if len(page.Items) != 3 {
			t.Fatalf("Query(%+v): %d items, want 3", q, len(page.Items))
		}
		if page.Cursor != "" {
			q.Cursor = page.Cursor
			next := e.query(t, q)
			if len(next.Items) != 0 || next.Cursor != "" {
				t.Errorf("page after the last: %d items, cursor %q; want none", len(next.Items), next.Cursor)
			}
		}
	}
}

func testQueryDefaultLimit(t *testing.T, e *env) {
	var items []store.Item
	for i := range 101 {
		items = append(items, store.Item{Key: e.key("p", fmt.Sprintf("%03d", i))})
	}
	e.put(t, items...)
	page := e.query(t, store.Query{PK: e.pk("p")})
	if len(page.Items) != 100 || page.Items[99].SK != "099" || page.Cursor == "" {
		t.Fatalf("Limit 0: got %d items, cursor %q; want 100 and a cursor", len(page.Items), page.Cursor)
	}
	rest := e.query(t, store.Query{PK: e.pk("p"), Cursor: page.Cursor})
	wantSKs(t, "second page", rest.Items, "100")
	if rest.Cursor != "" {
		t.Errorf("cursor %q after the last item", rest.Cursor)
	}
	if n := len(e.query(t, store.Query{PK: e.pk("p"), Limit: 1000}).Items); n != 101 {
		t.Errorf("Limit 1000: got %d items, want 101", n)
	}
}

func testQueryInvalid(t *testing.T, e *env) {
	p := e.pk("p")
	e.put(t, store.Item{Key: store.Key{PK: p, SK: "a"}})
	for _, q := range []store.Query{
		{PK: p, Limit: -1},
		{PK: p, Limit: 1001},
		{PK: ""},
		{PK: p, Index: "gsi9"},
		{PK: p, SKPrefix: "a", SKFrom: "a"},
		{PK: p, SKPrefix: "a", SKTo: "b"},
		{PK: p, SKFrom: "b", SKTo: "a"},
		{PK: p + strings.Repeat("x", 2049-len(p))},
		{PK: p, SKPrefix: strings.Repeat("x", 1025)},
		{PK: p + "\x00"},
		{PK: p, SKPrefix: "a\x00"},
		{PK: p, SKFrom: "a\x00"},
		{PK: p, SKTo: "\x00"},
		{PK: p + "\xff"},
		{PK: p, SKPrefix: "\xff"},
		{PK: p, SKFrom: "\xc3"},
	} {
		_, err := e.s.Query(e.ctx, q)
		wantRejected(t, fmt.Sprintf("Query(%+v)", q), err)
	}
}

func testPaginate(t *testing.T, e *env) {
	p := e.pk("p")
	var all []string
	var items []store.Item
	for i := range 25 {
		sk := fmt.Sprintf("item#%02d", i)
		all = append(all, sk)
		items = append(items, store.Item{Key: store.Key{PK: p, SK: sk}})
	}
	e.put(t, items...)
	rev := slices.Clone(all)
	slices.Reverse(rev)

	tests := []struct {
		q     store.Query
		want  []string
		pages []int
	}{
		{store.Query{Limit: 7}, all, []int{7, 7, 7, 4}},
		{store.Query{Limit: 7, Desc: true}, rev, []int{7, 7, 7, 4}},
		{store.Query{Limit: 5, SKFrom: "item#03", SKTo: "item#21"}, all[3:22], []int{5, 5, 5, 4}},
		{store.Query{Limit: 5, SKFrom: "item#03", SKTo: "item#21", Desc: true}, rev[3:22], []int{5, 5, 5, 4}},
		{store.Query{Limit: 4, SKPrefix: "item#1"}, all[10:20], []int{4, 4, 2}},
		{store.Query{Limit: 4, SKPrefix: "item#1", Desc: true}, rev[5:15], []int{4, 4, 2}},
		{store.Query{Limit: 2, SKFrom: "item#22"}, all[22:], []int{2, 1}},
	}
	for _, tc := range tests {
		q := tc.q
		q.PK = p
		var got []store.Item
		var sizes []int
		for range 100 {
			page := e.query(t, q)
			got = append(got, page.Items...)
			sizes = append(sizes, len(page.Items))
			if page.Cursor == "" {
				break
			}
			q.Cursor = page.Cursor
		}
		what := fmt.Sprintf("paginating %+v", tc.q)
		wantSKs(t, what, got, tc.want...)
		// Each last page is short, so its cursor must be empty.
		if !slices.Equal(sizes, tc.pages) {
			t.Errorf("%s: page sizes %v, want %v", what, sizes, tc.pages)
		}
	}
}

func testPaginateIndex(t *testing.T, e *env) {
	// 25 items in 5 table partitions, with only 5 distinct gsi1 sort keys,
	// so pages end in the middle of runs of equal index keys.
	g := e.pk("g")
	var items []store.Item
	for i := range 25 {
		items = append(items, store.Item{
			Key:  e.key(fmt.Sprintf("t%d", i%5), fmt.Sprintf("item#%02d", i)),
			GSI1: store.IndexKey{PK: g, SK: fmt.Sprintf("day#%d", i%5)},
		})
	}
	// Not in the partition.
	items = append(items, store.Item{Key: e.key("t0", "other"), GSI1: store.IndexKey{PK: g + "x", SK: "day#1"}})
	e.put(t, items...)

	for _, desc := range []bool{false, true} {
		got := e.queryAll(t, store.Query{Index: store.GSI1, PK: g, Limit: 7, Desc: desc})
		if len(got) != 25 {
			t.Fatalf("desc=%v: got %d items, want 25", desc, len(got))
		}
		seen := map[store.Key]bool{}
		for i, it := range got {
			if seen[it.Key] {
				t.Errorf("desc=%v: item %q/%q returned twice", desc, it.PK, it.SK)
			}
			seen[it.Key] = true
			if i > 0 {
				prev := got[i-1].GSI1.SK
				if (!desc && prev > it.GSI1.SK) || (desc && prev < it.GSI1.SK) {
					t.Errorf("desc=%v: index sort key %q after %q", desc, it.GSI1.SK, prev)
				}
			}
		}
	}
	got := e.queryAll(t, store.Query{Index: store.GSI1, PK: g, SKFrom: "day#1", SKTo: "day#2", Limit: 3})
	if len(got) != 10 {
		t.Errorf("bounded index query: got %d items, want 10", len(got))
	}
	for _, it := range got {
		if it.GSI1.SK != "day#1" && it.GSI1.SK != "day#2" {
			t.Errorf("bounded index query returned index sort key %q", it.GSI1.SK)
		}
	}
}

func testCursorPositional(t *testing.T, e *env) {
	// A cursor marks a position: items written or deleted after it was
	// issued show up in, or vanish from, the pages that follow.
	p := e.pk("p")
	var items []store.Item
	for i := range 25 {
		items = append(items, store.Item{Key: store.Key{PK: p, SK: fmt.Sprintf("item#%02d", i)}})
	}
	e.put(t, items...)
	q := store.Query{PK: p, Limit: 7}
	first := e.query(t, q)
	wantSKs(t, "first page", first.Items, "item#00", "item#01", "item#02", "item#03", "item#04", "item#05", "item#06")
	e.transact(t,
		store.Put(store.Item{Key: store.Key{PK: p, SK: "item#03b"}}),
		store.Put(store.Item{Key: store.Key{PK: p, SK: "item#20b"}}),
		store.Delete(store.Key{PK: p, SK: "item#06"}), // the cursor's own item
		store.Delete(store.Key{PK: p, SK: "item#10"}),
	)
	q.Cursor = first.Cursor
	rest := e.queryAll(t, q)
	want := []string{"item#07", "item#08", "item#09"}
	for i := 11; i < 25; i++ {
		want = append(want, fmt.Sprintf("item#%02d", i))
		if i == 20 {
			want = append(want, "item#20b")
		}
	}
	wantSKs(t, "after the cursor", rest, want...)
}

func testCursorMisuse(t *testing.T, e *env) {
	p1, p2 := e.pk("p1"), e.pk("p2")
	var items []store.Item
	for _, sk := range []string{"a", "b", "c"} {
		for _, p := range []string{p1, p2} {
			// Every index has a partition named p1 and p2 too.
			ik := store.IndexKey{PK: p, SK: sk}
			items = append(items, store.Item{Key: store.Key{PK: p, SK: sk}, GSI1: ik, GSI2: ik, GSI3: ik})
		}
	}
	e.put(t, items...)

	cursors := map[store.Index]string{}
	for _, ix := range []store.Index{store.Table, store.GSI1, store.GSI2, store.GSI3} {
		page := e.query(t, store.Query{Index: ix, PK: p1, Limit: 1})
		if page.Cursor == "" {
			t.Fatalf("%q: no cursor", ix)
		}
		cursors[ix] = page.Cursor
		// The cursor works where it belongs.
		next := e.query(t, store.Query{Index: ix, PK: p1, Limit: 1, Cursor: page.Cursor})
		wantSKs(t, fmt.Sprintf("%q second page", ix), next.Items, "b")
	}
	for from, c := range cursors {
		for _, ix := range []store.Index{store.Table, store.GSI1, store.GSI2, store.GSI3} {
			for _, p := range []string{p1, p2} {
				if ix == from && p == p1 {
					continue
				}
				_, err := e.s.Query(e.ctx, store.Query{Index: ix, PK: p, Cursor: c})
				if !errors.Is(err, store.ErrInvalidCursor) {
					t.Errorf("cursor of %q/p1 used on %q/%s: got %v, want ErrInvalidCursor", from, ix, p[len(p)-2:], err)
				}
			}
		}
	}

	c := cursors[store.Table]
	for _, bad := range []string{
		"garbage",
		"%%%",
		c[:len(c)/2],
		base64.RawURLEncoding.EncodeToString([]byte("{}")),
		base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0x10, 0x80}),
	} {
		_, err := e.s.Query(e.ctx, store.Query{PK: p1, Cursor: bad})
		if !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("cursor %q: got %v, want ErrInvalidCursor", bad, err)
		}
	}
}

func testIndex(t *testing.T, e *env) {
	g, h := e.pk("g"), e.pk("h")
	a := store.Item{Key: e.key("t1", "a"), GSI1: store.IndexKey{PK: g, SK: "2024-01-01"}, GSI2: store.IndexKey{PK: h, SK: "x"}, Data: []byte("A")}
	b := store.Item{Key: e.key("t1", "b"), GSI1: store.IndexKey{PK: g, SK: "2024-01-02"}}
	c := store.Item{Key: e.key("t2", "c"), GSI1: store.IndexKey{PK: g, SK: "2024-01-02"}}
	d := store.Item{Key: e.key("t2", "d"), GSI2: store.IndexKey{PK: h, SK: "y"}}
	other := store.Item{Key: e.key("t2", "e"), GSI1: store.IndexKey{PK: g + "2", SK: "2024-01-01"}}
	f := store.Item{Key: e.key("t3", "f"), GSI3: store.IndexKey{PK: g, SK: "2024-01-01"}}
	e.put(t, a, b, c, d, other, f)

	// wantIndex checks an index query; items with equal index sort keys
	// come in an order the store chooses, so each group is a set.
	wantIndex := func(what string, q store.Query, groups ...[]store.Item) {
		t.Helper()
		got := e.query(t, q).Items
		n := 0
		for _, g := range groups {
			n += len(g)
		}
		if len(got) != n {
			t.Errorf("%s: got %d items %q, want %d", what, len(got), sks(got), n)
			return
		}
		for _, group := range groups {
			for _, want := range group {
				i := slices.IndexFunc(got[:len(group)], func(it store.Item) bool { return it.Key == want.Key })
				if i < 0 {
					t.Errorf("%s: got %q, want %q next", what, sks(got), want.SK)
					return
				}
				if !equal(got[i], want.Projection(q.Index)) {
					t.Errorf("%s: got %s, want %s", what, show(got[i]), show(want.Projection(q.Index)))
				}
			}
			got = got[len(group):]
		}
	}
	wantIndex("gsi1", store.Query{Index: store.GSI1, PK: g}, []store.Item{a}, []store.Item{b, c})
	wantIndex("gsi1 desc", store.Query{Index: store.GSI1, PK: g, Desc: true}, []store.Item{b, c}, []store.Item{a})
	wantIndex("gsi1 prefix", store.Query{Index: store.GSI1, PK: g, SKPrefix: "2024-01-02"}, []store.Item{b, c})
	wantIndex("gsi1 from", store.Query{Index: store.GSI1, PK: g, SKFrom: "2024-01-02"}, []store.Item{b, c})
	wantIndex("gsi1 to", store.Query{Index: store.GSI1, PK: g, SKTo: "2024-01-01"}, []store.Item{a})
	wantIndex("gsi1 limit", store.Query{Index: store.GSI1, PK: g, Limit: 1}, []store.Item{a})
	wantIndex("gsi2", store.Query{Index: store.GSI2, PK: h}, []store.Item{a}, []store.Item{d})
	wantIndex("gsi3", store.Query{Index: store.GSI3, PK: g}, []store.Item{f})
	wantIndex("gsi2 of gsi1's partition", store.Query{Index: store.GSI2, PK: g})
	wantIndex("table of gsi1's partition", store.Query{PK: g})

	// Moving an item's index key moves its entry.
	a.GSI1.SK = "2024-02-01"
	e.put(t, a)
	wantIndex("a moved", store.Query{Index: store.GSI1, PK: g}, []store.Item{b, c}, []store.Item{a})
	b.GSI1 = store.IndexKey{}
	e.put(t, b)
	wantIndex("b dropped", store.Query{Index: store.GSI1, PK: g}, []store.Item{c}, []store.Item{a})
	c.GSI1.PK = g + "2"
	e.put(t, c)
	wantIndex("c moved out", store.Query{Index: store.GSI1, PK: g}, []store.Item{a})
	wantIndex("c moved in", store.Query{Index: store.GSI1, PK: g + "2"}, []store.Item{other}, []store.Item{c})
	e.transact(t, store.Delete(a.Key))
	wantIndex("a deleted", store.Query{Index: store.GSI1, PK: g})
	wantIndex("a deleted from gsi2", store.Query{Index: store.GSI2, PK: h}, []store.Item{d})
}
