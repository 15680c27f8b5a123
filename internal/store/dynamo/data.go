package dynamo

import (
	"bytes"
	"compress/flate"
	_ "embed"
	"fmt"
	"io"
	"sync"
)

// An item's data is stored packed when that is shorter: DEFLATE with a
// preset dictionary of the records' JSON (field names, prefixes of ids and
// times), after a version byte that JSON never begins with. A record of
// 500 bytes takes about 170: storage is billed per byte for the item and
// each index entry that projects data (docs/aws.md, "What a conversion
// costs"), and a write per started KB. Data written unpacked (by older
// code, or not shorter packed) reads as it is.
const packedV1 = 0x01

// dictV1 is packedV1's dictionary. Every item packed with it needs it to
// be read: it never changes (TestDictionaryNeverChanges); another
// dictionary needs another version byte.
//
//go:embed dict1.json
var dictV1 []byte

var (
	packers = sync.Pool{New: func() any {
		w, err := flate.NewWriterDict(nil, flate.DefaultCompression, dictV1)
		if err != nil {
			panic(err)
		}
		return w
	}}
	unpackers = sync.Pool{New: func() any { return flate.NewReader(nil) }}
)

// packData returns data as stored: packed when that is shorter, and
// always when it begins with the version byte, which unpacked it would be
// read as.
func packData(data []byte) []byte {
	var b bytes.Buffer
	b.Grow(len(data))
	b.WriteByte(packedV1)
	w := packers.Get().(*flate.Writer)
	defer packers.Put(w)
	w.Reset(&b)
	if _, err := w.Write(data); err != nil || w.Close() != nil {
		panic(fmt.Sprintf("dynamo: packing data: %v", err)) // writes to memory do not fail
	}
	if b.Len() >= len(data) && (len(data) == 0 || data[0] != packedV1) {
		return data
	}
	return b.Bytes()
}

// UnpackData returns an item's data as stored by this package (in the
// table, an index or the table's stream) as it was written.
func UnpackData(stored []byte) ([]byte, error) {
	if len(stored) == 0 || stored[0] != packedV1 {
		return stored, nil
	}
	r := unpackers.Get().(io.ReadCloser)
	defer unpackers.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(stored[1:]), dictV1); err != nil {
		return nil, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("dynamo: packed data: %w", err)
	}
	return data, nil
}
