package bolt

import (
	"encoding/json"
	"math"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// A store written by an earlier version holds items as JSON. Opening it with
// this version must find them, indexes and all, and rewrite an item in the
// current form when it is next written.
func TestReadsItemsWrittenAsJSON(t *testing.T) {
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tally.db")
	legacy := store.Item{
		Key:       store.Key{PK: "BRD#b", SK: "OFF#o"},
		GSI3:      store.IndexKey{PK: "DUE#1", SK: "0001#wh"},
		Attrs:     map[string]string{"status": "active"},
		Nums:      map[string]int64{"n": math.MaxInt64},
		Data:      []byte(`{"name":"Shoes"}`),
		ExpiresAt: time.Now().Add(time.Hour).Unix(),
	}
	s := openTest(t, path, time.Hour)
	if err := s.Transact(ctx, store.Put(legacy)); err != nil {
		t.Fatal(err)
	}
	// Replace the stored value with the JSON the earlier version wrote.
	old, err := json.Marshal(jsonRecord{GSI3: legacy.GSI3, Attrs: legacy.Attrs, Nums: legacy.Nums, Data: legacy.Data, TTL: legacy.ExpiresAt})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.db.Update(func(tx *bbolt.Tx) error { return tx.Bucket(itemsBucket).Put(itemKey(legacy.Key), old) }); err != nil {
		t.Fatal(err)
	}

	got, err := s.Get(ctx, legacy.Key)
	if err != nil || !reflect.DeepEqual(got, legacy) {
		t.Fatalf("Get of a JSON item = %+v, %v; want %+v", got, err, legacy)
	}
	page, err := s.Query(ctx, store.Query{Index: store.GSI3, PK: "DUE#1"})
	if err != nil || len(page.Items) != 1 || !reflect.DeepEqual(page.Items[0], legacy) {
		t.Fatalf("index query over a JSON item = %+v, %v", page, err)
	}
	// A conditional update reads the old form and writes the new one.
	after, err := s.Update(ctx, store.Op{Kind: store.OpUpdate, Key: legacy.Key, Add: map[string]int64{"m": 1}, Conds: []store.Cond{store.AttrEquals("status", "active")}})
	if err != nil || after.Nums["m"] != 1 || after.Nums["n"] != math.MaxInt64 || string(after.Data) != string(legacy.Data) {
		t.Fatalf("Update of a JSON item = %+v, %v", after, err)
	}
	if err := s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(itemsBucket).Get(itemKey(legacy.Key)); v[0] != codecV1 {
			t.Errorf("after a write the item is still stored as %q", v)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	checkConsistent(t, s)
}

func TestCodecRoundTrip(t *testing.T) {
	for _, it := range []store.Item{
		{Key: store.Key{PK: "p", SK: "s"}},
		benchItem,
		{Key: store.Key{PK: "p", SK: "s"}, Nums: map[string]int64{"lo": math.MinInt64, "hi": math.MaxInt64, "neg": -1}, ExpiresAt: -5},
		{Key: store.Key{PK: "p", SK: "s"}, Attrs: map[string]string{"a": "", "é": "\xff\x00"}, Data: []byte{0}},
	} {
		v, err := encode(it)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(it.Key, v)
		if err != nil || !reflect.DeepEqual(got, it) {
			t.Errorf("round trip of %+v = %+v, %v", it, got, err)
		}
		again, _ := encode(it)
		if string(again) != string(v) {
			t.Errorf("encoding %+v twice gave different bytes", it)
		}
	}
}

// A write reads only the parts of an item it needs; what it reads is as
// stored.
func TestDecodeParts(t *testing.T) {
	v, err := encode(benchItem)
	if err != nil {
		t.Fatal(err)
	}
	noEntries := store.Item{Key: benchItem.Key, Attrs: benchItem.Attrs, Nums: benchItem.Nums}
	entries := benchItem
	entries.Data = nil
	for want, item := range map[parts]store.Item{0: noEntries, entryParts: entries, allParts: benchItem} {
		got, err := decodeParts(benchItem.Key, v, want)
		if err != nil || !reflect.DeepEqual(got, item) {
			t.Errorf("decodeParts(%b) = %+v, %v; want %+v", want, got, err, item)
		}
	}
}

// FuzzDecode: no stored bytes, however damaged, make decode panic, and what
// decodes re-encodes to an item that decodes the same.
func FuzzDecode(f *testing.F) {
	v, _ := encode(benchItem)
	f.Add(v)
	f.Add(v[:len(v)/2])
	f.Add([]byte{codecV1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte(`{"a":{"x":"y"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		k := store.Key{PK: "p", SK: "s"}
		it, err := decode(k, b)
		if err != nil {
			return
		}
		v, err := encode(it)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decode(k, v)
		if err != nil || !reflect.DeepEqual(normal(again), normal(it)) {
			t.Fatalf("re-decoded %+v, %v; want %+v", again, err, it)
		}
	})
}

// normal makes empty maps and data nil: the store may return either.
func normal(it store.Item) store.Item {
	if len(it.Attrs) == 0 {
		it.Attrs = nil
	}
	if len(it.Nums) == 0 {
		it.Nums = nil
	}
	if len(it.Data) == 0 {
		it.Data = nil
	}
	return it
}
