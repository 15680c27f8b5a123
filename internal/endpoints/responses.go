package endpoints

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"sync"

	"github.com/tally-hq/tally/internal/store"
)

// A delivery's receiver answers (the first 4 KiB of each attempt's body)
// are most of what a delivery with a long answer writes and keeps: its
// write units and its 30 days of storage. They are stored as their JSON
// list in the string attribute responsesAttr, or, when that is shorter,
// as the JSON compressed (DEFLATE) in the binary attribute of that name:
// an HTML page's 4 KiB take about 1.9 KB so, where their JSON, its <, >
// and & escaped, took about 5.4 KB. Items written before binary
// attributes hold the compressed form in base64 after deflatedPrefix, in
// the string attribute; JSON starts with "[", so the two string forms are
// told apart by their first byte.
const deflatedPrefix = "z"

// maxResponsesJSON bounds what a stored answer list inflates to: the
// attempts' 4 KiB each, escaped, with room to spare.
const maxResponsesJSON = 1 << 20

var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestCompression) // a valid level: no error
	return w
}}

// putResponses stores responses in it, in the shorter of their two forms.
func putResponses(it *store.Item, responses []string) {
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false) // the answers are often HTML: their <, > and & as they are
	if err := enc.Encode(responses); err != nil {
		panic(err) // strings only: it does not fail
	}
	js.Truncate(js.Len() - 1) // Encode's newline
	var z bytes.Buffer
	w := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(w)
	w.Reset(&z)
	_, _ = w.Write(js.Bytes()) // into memory: it does not fail
	_ = w.Close()
	if z.Len() < js.Len() {
		it.Bins = map[string][]byte{responsesAttr: z.Bytes()}
		return
	}
	it.Attrs[responsesAttr] = js.String()
}

// responsesOf reads what putResponses stored (and the forms of items
// written before: JSON, HTML escaped, or DEFLATE in base64).
func responsesOf(it store.Item) ([]string, error) {
	var z io.Reader
	stored := it.Attrs[responsesAttr]
	if b, ok := it.Bins[responsesAttr]; ok {
		z = bytes.NewReader(b)
	} else if rest, ok := strings.CutPrefix(stored, deflatedPrefix); ok {
		z = base64.NewDecoder(base64.RawStdEncoding, strings.NewReader(rest))
	}
	js := []byte(stored)
	if z != nil {
		r := flate.NewReader(z)
		defer r.Close()
		var err error
		if js, err = io.ReadAll(io.LimitReader(r, maxResponsesJSON)); err != nil {
			return nil, err
		}
	}
	var responses []string
	err := json.Unmarshal(js, &responses)
	return responses, err
}
