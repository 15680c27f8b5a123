package records

import (
	"context"
	"errors"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// Page sizes of every list endpoint.
const (
	DefaultLimit = 50
	MaxLimit     = 100
)

// MaxScan bounds the items one list call reads while filtering, so a rare
// filter value cannot make a request read a whole table. A page may then
// hold fewer items than asked, with a cursor to go on.
const MaxScan = 1000

// ListParams are the paging parameters of every list.
type ListParams struct {
	Limit  int
	Cursor string
}

// Partition is one place a list reads from.
type Partition struct {
	Index store.Index
	PK    string
}

// Span is what a list reads: the same sort-key range of one or more
// partitions (the shards of one logical list), merged newest first.
type Span struct {
	Parts  []Partition
	Prefix string // sort keys start with it
	From   string // inclusive bounds after the prefix; empty is open
	To     string
	Filter string // the caller's filters, so a cursor only continues the same query
}

func validateLimit(limit int) (int, error) {
	switch {
	case limit == 0:
		return DefaultLimit, nil
	case limit < 1 || limit > MaxLimit:
		return 0, tally.Errorf(tally.ECodeValidation, "limit must be an integer from 1 to %d.", MaxLimit)
	}
	return limit, nil
}

// ShardedParts are the partitions of a sharded, per-offer and per-partner
// indexed list (conversions, clicks): the table's shards, or the shards of
// the per-offer (GSI1) or per-partner (GSI2) index when a filter names one,
// the narrowest read the filters allow.
func ShardedParts(offerID, partnerID string, table, byOffer, byPartner func(shard int) string) []Partition {
	parts := make([]Partition, keys.Shards)
	for shard := range parts {
		switch {
		case offerID != "":
			parts[shard] = Partition{Index: store.GSI1, PK: byOffer(shard)}
		case partnerID != "":
			parts[shard] = Partition{Index: store.GSI2, PK: byPartner(shard)}
		default:
			parts[shard] = Partition{PK: table(shard)}
		}
	}
	return parts
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

// List returns one page of records of type T from the partitions, newest
// (greatest sort key) first, keeping only those keep accepts (nil keeps
// all), with the cursor of the next page ("" after the last).
func List[T any](ctx context.Context, db *DB, parts []Partition, p ListParams, keep func(*T) bool) ([]T, string, error) {
	return ListSpan(ctx, db, Span{Parts: parts}, p, keep)
}

// ListSpan is list over a span.
func ListSpan[T any](ctx context.Context, db *DB, sp Span, p ListParams, keep func(*T) bool) ([]T, string, error) {
	limit, err := validateLimit(p.Limit)
	if err != nil {
		return nil, "", err
	}
	cur := listCursor{Last: make([]string, len(sp.Parts)), Done: make([]bool, len(sp.Parts))}
	if p.Cursor != "" {
		if cur, err = db.openCursor(ctx, sp, p.Cursor); err != nil {
			return nil, "", err
		}
	}
	st := db.Store
	iters := make([]*partIter, len(sp.Parts))
	for i, part := range sp.Parts {
		q := store.Query{Index: part.Index, PK: part.PK, Desc: true, Limit: limit + 1,
			SKFrom: sp.Prefix + sp.From, SKTo: sp.Prefix + sp.To}
		if sp.To == "" {
			q.SKTo = sp.Prefix + "~" // sorts after every identifier character
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
	for scanned := 0; len(out) < limit && scanned < MaxScan; scanned++ {
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
		if err := Decode(item, &v); err != nil {
			return nil, "", err
		}
		if keep != nil && !keep(&v) {
			continue
		}
		if _, part := any(&v).(WholeReader); part && it.q.Index != store.Table && it.q.Index != store.GSI3 {
			// Only what the page keeps: one read each.
			whole, err := st.Get(ctx, item.Key)
			if errors.Is(err, store.ErrNotFound) {
				continue // deleted since the index was read
			}
			if err != nil {
				return nil, "", err
			}
			v = *new(T)
			if err := Decode(whole, &v); err != nil {
				return nil, "", err
			}
			if keep != nil && !keep(&v) {
				continue // changed since the index was read
			}
		}
		out = append(out, v)
	}
	if i, err := peek(); err != nil || i < 0 {
		return out, "", err
	}
	next, err := db.sealCursor(ctx, sp, cur)
	return out, next, err
}
