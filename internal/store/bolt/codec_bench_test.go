package bolt

import (
	"bytes"
	"testing"

	"github.com/tally-hq/tally/internal/store"
)

// benchItem is shaped like a stored conversion: three index keys, a status,
// a TTL and a JSON body of about 500 bytes.
var benchItem = store.Item{
	Key:       store.Key{PK: "BRD#brd_01jf0000000000000000000000#CNV#2", SK: "cnv_01jf0000000000000000000000"},
	GSI1:      store.IndexKey{PK: "BRD#brd_01jf0000000000000000000000#OFF#off_01jf0000000000000000000000#CNV#2", SK: "cnv_01jf0000000000000000000000"},
	GSI2:      store.IndexKey{PK: "BRD#brd_01jf0000000000000000000000#PRT#prt_01jf0000000000000000000000#CNV#2", SK: "cnv_01jf0000000000000000000000"},
	Attrs:     map[string]string{"status": "approved"},
	Nums:      map[string]int64{"n": 3},
	Data:      bytes.Repeat([]byte(`{"k":"v"}`), 55),
	ExpiresAt: 1_800_000_000,
}

func BenchmarkCodec(b *testing.B) {
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := encode(benchItem); err != nil {
				b.Fatal(err)
			}
		}
	})
	v, err := encode(benchItem)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decode(benchItem.Key, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
