package bolt

import (
	"math"
	"reflect"
	"testing"

	"github.com/tally-hq/tally/internal/store"
)

func TestCodecRoundTrip(t *testing.T) {
	for _, it := range []store.Item{
		{Key: store.Key{PK: "p", SK: "s"}},
		benchItem,
		{Key: store.Key{PK: "p", SK: "s"}, Nums: map[string]int64{"lo": math.MinInt64, "hi": math.MaxInt64, "neg": -1}, ExpiresAt: -5},
		{Key: store.Key{PK: "p", SK: "s"}, Attrs: map[string]string{"a": "", "é": "\xff\x00"}, Data: []byte{0}},
		{Key: store.Key{PK: "p", SK: "s"}, Bins: map[string][]byte{"z": {0, 0xff}, "y": {1}}, Nums: map[string]int64{"n": 1}, Data: []byte{2}},
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

// Items written before binary attributes (codecV1) read as they were.
func TestDecodeV1(t *testing.T) {
	v := []byte{codecV1, 0, 0, 2, 'g', '1', 1, 's', 0, 0, 84, // index keys, ttl 42
		1, 1, 'a', 1, 'b', // attrs
		1, 1, 'n', 6, // nums
		'{', '}'} // data
	want := store.Item{Key: store.Key{PK: "p", SK: "s"}, GSI2: store.IndexKey{PK: "g1", SK: "s"}, ExpiresAt: 42,
		Attrs: map[string]string{"a": "b"}, Nums: map[string]int64{"n": 3}, Data: []byte("{}")}
	got, err := decode(want.Key, v)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("decode(codecV1 item) = %+v, %v; want %+v", got, err, want)
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
	f.Add([]byte{codecV2, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
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
	if len(it.Bins) == 0 {
		it.Bins = nil
	}
	if len(it.Data) == 0 {
		it.Data = nil
	}
	return it
}
