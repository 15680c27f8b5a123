package endpoints

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/json"
	"io"
	"strings"
	"sync"
)

// A delivery's receiver answers (the first 4 KiB of each attempt's body)
// are most of what a delivery with a long answer writes and keeps: its
// write units and its 30 days of storage. They are stored as their JSON,
// or, when that is shorter, as the JSON compressed (DEFLATE) in base64
// after deflatedPrefix: an HTML page's 4 KiB take about 2.6 KB so, where
// their JSON, its <, > and & escaped, took about 5.4 KB. JSON starts with
// "[", so the two forms are told apart by their first byte.
const deflatedPrefix = "z"

// maxResponsesJSON bounds what a stored answer list inflates to: the
// attempts' 4 KiB each, escaped, with room to spare.
const maxResponsesJSON = 1 << 20

var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestCompression) // a valid level: no error
	return w
}}

// packResponses is the stored form of responses.
func packResponses(responses []string) string {
	var js bytes.Buffer
	enc := json.NewEncoder(&js)
	enc.SetEscapeHTML(false) // the answers are often HTML: their <, > and & as they are
	if err := enc.Encode(responses); err != nil {
		panic(err) // strings only: it does not fail
	}
	js.Truncate(js.Len() - 1) // Encode's newline
	var z strings.Builder
	z.WriteString(deflatedPrefix)
	b64 := base64.NewEncoder(base64.RawStdEncoding, &z)
	w := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(w)
	w.Reset(b64)
	_, _ = w.Write(js.Bytes()) // into memory: it does not fail
	_ = w.Close()
	_ = b64.Close()
	if z.Len() < js.Len() {
		return z.String()
	}
	return js.String()
}

// unpackResponses reads what packResponses stored (and the JSON that items
// written before compression hold).
func unpackResponses(stored string) ([]string, error) {
	js := []byte(stored)
	if rest, ok := strings.CutPrefix(stored, deflatedPrefix); ok {
		r := flate.NewReader(base64.NewDecoder(base64.RawStdEncoding, strings.NewReader(rest)))
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
