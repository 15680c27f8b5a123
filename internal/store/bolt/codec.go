package bolt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/tally-hq/tally/internal/store"
)

// Items are stored in a compact binary form: reading and writing it costs a
// few hundred nanoseconds, where JSON (with Data base64-encoded inside)
// costs several microseconds, a large share of the local server's CPU.
//
//	format byte (codecV2)
//	gsi1pk gsi1sk gsi2pk gsi2sk gsi3pk gsi3sk   strings
//	ttl                                         varint
//	len(attrs), then name value per attr        uvarint, strings
//	len(nums), then name value per number       uvarint, string varint
//	len(bins), then name value per bin          uvarint, strings
//	data                                        the rest
//
// A string is a uvarint length and its bytes. Items written in codecV1, the
// same without the bins, read as they are; decode rejects a value whose
// first byte is neither.
const (
	codecV1 = 1
	codecV2 = 2
)

var errCorrupt = errors.New("truncated or malformed item")

func encode(it store.Item) ([]byte, error) {
	n := 1 + 6*binary.MaxVarintLen64 + len(it.Data) + binary.MaxVarintLen64 +
		len(it.GSI1.PK) + len(it.GSI1.SK) + len(it.GSI2.PK) + len(it.GSI2.SK) + len(it.GSI3.PK) + len(it.GSI3.SK)
	for k, v := range it.Attrs {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	for k := range it.Nums {
		n += 2*binary.MaxVarintLen64 + len(k)
	}
	for k, v := range it.Bins {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	b := make([]byte, 1, n+3*binary.MaxVarintLen64)
	b[0] = codecV2
	for _, ik := range [...]store.IndexKey{it.GSI1, it.GSI2, it.GSI3} {
		b = appendString(appendString(b, ik.PK), ik.SK)
	}
	b = binary.AppendVarint(b, it.ExpiresAt)
	b = appendSorted(b, it.Attrs, appendString)
	b = appendSorted(b, it.Nums, binary.AppendVarint)
	b = appendSorted(b, it.Bins, appendBytes)
	return append(b, it.Data...), nil
}

// appendSorted appends the number of entries of m, then each name and its
// value in the order of names, so that the same item always encodes to the
// same bytes. Most items have one attribute or counter at most, which need
// no sorting (sorting was 7 % of BenchmarkApply) nor a slice of names.
func appendSorted[V any](b []byte, m map[string]V, appendValue func([]byte, V) []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	if len(m) <= 1 {
		for k, v := range m {
			b = appendValue(appendString(b, k), v)
		}
		return b
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		b = appendValue(appendString(b, k), m[k])
	}
	return b
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

func appendBytes(b, s []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// decode returns a fresh item (no memory shared with the bbolt page).
func decode(k store.Key, v []byte) (store.Item, error) {
	return decodeParts(k, v, allParts)
}

// parts says which parts of an item a reader needs besides its attributes
// and counters, so that a write does not copy what it does not use: a
// condition needs none (a checked offer's body and index keys are not
// copied for nothing), replacing or deleting an item needs its index keys
// and expiry to move its entries, and only an update needs Data.
type parts uint8

const (
	entryParts parts = 1 << iota // index keys and ExpiresAt
	dataParts                    // Data
	allParts   = entryParts | dataParts
)

// decodeParts is decode leaving out what want does not ask for.
func decodeParts(k store.Key, v []byte, want parts) (store.Item, error) {
	if len(v) == 0 || (v[0] != codecV1 && v[0] != codecV2) {
		return store.Item{}, corrupt(k)
	}
	r := reader{b: v[1:]}
	it := store.Item{Key: k}
	for _, ik := range [...]*store.IndexKey{&it.GSI1, &it.GSI2, &it.GSI3} {
		if want&entryParts != 0 {
			ik.PK, ik.SK = r.string(), r.string()
		} else {
			r.skip()
			r.skip()
		}
	}
	if exp := r.varint(); want&entryParts != 0 {
		it.ExpiresAt = exp
	}
	if n := r.count(); n > 0 {
		it.Attrs = make(map[string]string, n)
		for range n {
			name := r.string()
			it.Attrs[name] = r.string()
		}
	}
	if n := r.count(); n > 0 {
		it.Nums = make(map[string]int64, n)
		for range n {
			name := r.string()
			it.Nums[name] = r.varint()
		}
	}
	if v[0] == codecV2 {
		if n := r.count(); n > 0 {
			it.Bins = make(map[string][]byte, n)
			for range n {
				name := r.string()
				it.Bins[name] = append([]byte(nil), r.bytes()...)
			}
		}
	}
	if r.err != nil {
		return store.Item{}, corrupt(k)
	}
	if want&dataParts != 0 && len(r.b) > 0 {
		it.Data = append([]byte(nil), r.b...)
	}
	return it, nil
}

// reader takes fields off the front of an encoded item; after the first
// error every read returns a zero value and err stays set.
type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	x, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

func (r *reader) varint() int64 {
	x, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return x
}

// count reads a number of entries, each of which takes at least two bytes.
func (r *reader) count() int {
	n := r.uvarint()
	if n > uint64(len(r.b)/2) {
		r.fail()
		return 0
	}
	return int(n)
}

func (r *reader) string() string {
	return string(r.bytes())
}

// skip passes over a string.
func (r *reader) skip() { r.bytes() }

// bytes returns the next string's bytes, in the encoded item.
func (r *reader) bytes() []byte {
	n := r.uvarint()
	if n > uint64(len(r.b)) {
		r.fail()
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *reader) fail() {
	if r.err == nil {
		r.err = errCorrupt
	}
	r.b = nil
}

// corrupt is the error of decoding the item at k from damaged bytes.
func corrupt(k store.Key) error {
	return fmt.Errorf("bolt: corrupt item %q/%q: %w", k.PK, k.SK, errCorrupt)
}
