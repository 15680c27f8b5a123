package tracking

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"hash/fnv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/store"
)

// Page sizes of every list endpoint.
const (
	DefaultLimit = 50
	MaxLimit     = 100
)

// maxScan bounds the items one list call reads while filtering, so a rare
// filter value cannot make a request read a whole table. A page may then
// hold fewer items than asked, with a cursor to go on.
const maxScan = 1000

// ListParams are the paging parameters of every list.
type ListParams struct {
	Limit  int
	Cursor string
}

// partition is one place a list reads from.
type partition struct {
	index store.Index
	pk    string
}

// span is what a list reads: the same sort-key range of one or more
// partitions (the shards of one logical list), merged newest first.
type span struct {
	parts  []partition
	prefix string // sort keys start with it
	from   string // inclusive bounds after the prefix; empty is open
	to     string
	filter string // the caller's filters, so a cursor only continues the same query
}

// listCursor is the position in each partition: the last sort key handed
// out, and whether the partition is exhausted.
type listCursor struct {
	Last        []string `json:"l"`
	Done        []bool   `json:"d"`
	Fingerprint uint64   `json:"f"`
}

func (sp span) fingerprint() uint64 {
	h := fnv.New64a()
	for _, p := range sp.parts {
		h.Write([]byte(string(p.index) + "\x00" + p.pk + "\x00"))
	}
	h.Write([]byte(sp.prefix + "\x00" + sp.from + "\x00" + sp.to + "\x00" + sp.filter))
	return h.Sum64()
}

func validateLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultLimit, nil
	case limit < 1 || limit > MaxLimit:
		return 0, tally.Errorf(tally.ECodeValidation, "limit must be between 1 and %d.", MaxLimit)
	}
	return limit, nil
}

func invalidCursor() error {
	return tally.Errorf(tally.ECodeValidation, "cursor is not valid for this list; start again without it.")
}

func (sp span) decodeCursor(s string) (listCursor, error) {
	c := listCursor{Last: make([]string, len(sp.parts)), Done: make([]bool, len(sp.parts))}
	if s == "" {
		return c, nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(raw, &c) != nil ||
		len(c.Last) != len(sp.parts) || len(c.Done) != len(sp.parts) || c.Fingerprint != sp.fingerprint() {
		return listCursor{}, invalidCursor()
	}
	for _, last := range c.Last {
		if last != "" && !strings.HasPrefix(last, sp.prefix) {
			return listCursor{}, invalidCursor()
		}
	}
	return c, nil
}

func (c listCursor) encode() string {
	return base64.RawURLEncoding.EncodeToString(mustJSON(c))
}

// partIter reads one partition newest first, a page at a time.
type partIter struct {
	st      store.Store
	q       store.Query
	skip    string // the last key of the previous page, which the inclusive bound returns again
	buf     []store.Item
	started bool
}

func (it *partIter) head(ctx context.Context) (*store.Item, error) {
	for len(it.buf) == 0 && (!it.started || it.q.Cursor != "") {
		it.started = true
		page, err := it.st.Query(ctx, it.q)
		if err != nil {
			return nil, err
		}
		it.q.Cursor = page.Cursor
		for _, item := range page.Items {
			if item.IndexKey(it.q.Index).SK != it.skip {
				it.buf = append(it.buf, item)
			}
		}
	}
	if len(it.buf) == 0 {
		return nil, nil
	}
	return &it.buf[0], nil
}

// list returns one page of records of type T from sp, newest (greatest sort
// key) first, keeping only those keep accepts (nil keeps all).
func list[T any](ctx context.Context, st store.Store, parts []partition, p ListParams, keep func(*T) bool) ([]T, string, error) {
	return listSpan(ctx, st, span{parts: parts}, p, keep)
}

func listSpan[T any](ctx context.Context, st store.Store, sp span, p ListParams, keep func(*T) bool) ([]T, string, error) {
	limit, err := validateLimit(p.Limit)
	if err != nil {
		return nil, "", err
	}
	cur, err := sp.decodeCursor(p.Cursor)
	if err != nil {
		return nil, "", err
	}
	cur.Fingerprint = sp.fingerprint()
	iters := make([]*partIter, len(sp.parts))
	for i, part := range sp.parts {
		q := store.Query{Index: part.index, PK: part.pk, Desc: true, Limit: limit + 1,
			SKFrom: sp.prefix + sp.from, SKTo: sp.prefix + sp.to}
		if sp.to == "" {
			q.SKTo = sp.prefix + "~" // sorts after every identifier character
		}
		if cur.Last[i] != "" {
			q.SKTo = cur.Last[i]
		}
		if q.SKFrom > q.SKTo { // an empty range: nothing to read
			cur.Done[i] = true
		}
		iters[i] = &partIter{st: st, q: q, skip: cur.Last[i]}
	}
	// peek finds the partition whose next item is newest; -1 when all are exhausted.
	peek := func() (int, error) {
		best, bestSK := -1, ""
		for i, it := range iters {
			if cur.Done[i] {
				continue
			}
			h, err := it.head(ctx)
			if err != nil {
				if errors.Is(err, store.ErrInvalidCursor) {
					return -1, invalidCursor()
				}
				return -1, err
			}
			if h == nil {
				cur.Done[i] = true
				continue
			}
			if sk := h.IndexKey(it.q.Index).SK; best < 0 || sk > bestSK {
				best, bestSK = i, sk
			}
		}
		return best, nil
	}
	out := []T{}
	for scanned := 0; len(out) < limit && scanned < maxScan; scanned++ {
		i, err := peek()
		if err != nil {
			return nil, "", err
		}
		if i < 0 {
			break
		}
		it := iters[i]
		item := it.buf[0]
		it.buf = it.buf[1:]
		cur.Last[i] = item.IndexKey(it.q.Index).SK
		var v T
		if err := decode(item, &v); err != nil {
			return nil, "", err
		}
		if keep == nil || keep(&v) {
			out = append(out, v)
		}
	}
	if i, err := peek(); err != nil || i < 0 {
		return out, "", err
	}
	return out, cur.encode(), nil
}
