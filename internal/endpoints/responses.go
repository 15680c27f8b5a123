package endpoints

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"

	"github.com/tally-hq/tally/internal/store"
)

// A delivery's receiver answers (the first 4 KiB of each attempt's body)
// are most of what a delivery with a long answer writes and keeps: its
// write units and its 30 days of storage. Each attempt's answer is stored
// in the shortest of three forms, one after the other in the binary
// attribute responsesAttr:
//
//	form byte (answerText, answerDeflated or answerAgainst)
//	week                                  uvarint, answerAgainst only
//	length, then the bytes                uvarint
//
// answerAgainst is DEFLATE with its endpoint's dictionary of that week as
// preset dictionary (Answers): receivers answer alike, so an answer like
// the dictionary takes a few bytes. Items written before hold the answers'
// JSON list in the string attribute of that name, or that JSON compressed
// in base64 after deflatedPrefix (JSON starts with "[").
const (
	answerText     = 0
	answerDeflated = 1
	answerAgainst  = 2

	deflatedPrefix = "z"
)

// maxResponsesJSON bounds what a stored answer (or, in items written
// before, the answer list) inflates to: the attempts' 4 KiB each, escaped,
// with room to spare.
const maxResponsesJSON = 1 << 20

// packedAnswer is one attempt's answer as stored: its form, its
// dictionary's week (answerAgainst) and its bytes.
type packedAnswer struct {
	form  byte
	week  int64
	bytes []byte
}

var deflaters = sync.Pool{New: func() any {
	w, _ := flate.NewWriter(nil, flate.BestCompression) // a valid level: no error
	return w
}}

// pack is the shorter of answer as it is and compressed with w (from
// pool), which has the dictionary of week when form is answerAgainst.
func pack(answer string, pool *sync.Pool, form byte, week int64) packedAnswer {
	var z bytes.Buffer
	w := pool.Get().(*flate.Writer)
	w.Reset(&z)
	_, _ = io.WriteString(w, answer) // into memory: it does not fail
	_ = w.Close()
	pool.Put(w)
	if z.Len() >= len(answer) {
		return packedAnswer{form: answerText, bytes: []byte(answer)}
	}
	return packedAnswer{form: form, week: week, bytes: z.Bytes()}
}

// packNoDictionary is answer packed without a dictionary.
func packNoDictionary(answer string) packedAnswer {
	return pack(answer, &deflaters, answerDeflated, 0)
}

// appendAnswers is the stored form of answers.
func appendAnswers(b []byte, answers []packedAnswer) []byte {
	for _, a := range answers {
		b = append(b, a.form)
		if a.form == answerAgainst {
			b = binary.AppendUvarint(b, uint64(a.week))
		}
		b = binary.AppendUvarint(b, uint64(len(a.bytes)))
		b = append(b, a.bytes...)
	}
	return b
}

var errAnswers = errors.New("endpoints: malformed stored answers")

// parseAnswers reads what appendAnswers wrote.
func parseAnswers(b []byte) ([]packedAnswer, error) {
	var out []packedAnswer
	for len(b) > 0 {
		a := packedAnswer{form: b[0]}
		b = b[1:]
		if a.form > answerAgainst {
			return nil, errAnswers
		}
		if a.form == answerAgainst {
			w, n := binary.Uvarint(b)
			if n <= 0 {
				return nil, errAnswers
			}
			a.week, b = int64(w), b[n:]
		}
		l, n := binary.Uvarint(b)
		if n <= 0 || l > uint64(len(b)-n) {
			return nil, errAnswers
		}
		a.bytes, b = b[n:n+int(l)], b[n+int(l):]
		out = append(out, a)
	}
	return out, nil
}

// inflaters are reused: a flate reader is some 40 KB to make, and every
// read of a delivery inflates its answers compressed alone.
var inflaters = sync.Pool{New: func() any { return flate.NewReader(nil) }}

// text is the answer a holds, given its dictionary when it has one.
func (a packedAnswer) text(dict []byte) (string, error) {
	if a.form == answerText {
		return string(a.bytes), nil
	}
	r := inflaters.Get().(io.ReadCloser)
	defer inflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(a.bytes), dict); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(r, maxResponsesJSON))
	return string(b), err
}

// answersOf reads the answers stored in it: each attempt's packed form,
// and the text of those that need no dictionary.
func answersOf(it store.Item) ([]packedAnswer, []string, error) {
	if b, ok := it.Bins[responsesAttr]; ok {
		packed, err := parseAnswers(b)
		if err != nil {
			return nil, nil, err
		}
		texts := make([]string, len(packed))
		for i, a := range packed {
			if a.form != answerAgainst {
				if texts[i], err = a.text(nil); err != nil {
					return nil, nil, err
				}
			}
		}
		return packed, texts, nil
	}
	texts, err := olderResponses(it.Attrs[responsesAttr])
	return nil, texts, err
}

// olderResponses reads the answer lists of items written before: JSON, or
// JSON compressed in base64 after deflatedPrefix.
func olderResponses(stored string) ([]string, error) {
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
