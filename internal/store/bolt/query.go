package bolt

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// cursor is the decoded form of Page.Cursor. It names the index and
// partition it belongs to, so that it can never continue a query elsewhere,
// and the bucket key of the last returned item after the "PK 0x00" prefix.
type cursor struct {
	Index store.Index `json:"i,omitempty"`
	PK    string      `json:"p"`
	After string      `json:"a"`
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c) // cannot fail: strings only
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor returns the bucket key after which q continues.
func decodeCursor(q store.Query, part []byte) ([]byte, error) {
	b, err := base64.RawURLEncoding.DecodeString(q.Cursor)
	if err != nil {
		return nil, store.ErrInvalidCursor
	}
	var c cursor
	if err := json.Unmarshal(b, &c); err != nil || c.Index != q.Index || c.PK != q.PK || c.After == "" {
		return nil, store.ErrInvalidCursor
	}
	return append(bytes.Clone(part), c.After...), nil
}

// Query returns one page of a partition of the table or an index, in
// bucket key order: sort key, then (on an index) primary key.
func (s *Store) Query(ctx context.Context, q store.Query) (store.Page, error) {
	if err := ctx.Err(); err != nil {
		return store.Page{}, err
	}
	limit, err := store.ValidateQuery(q)
	if err != nil {
		return store.Page{}, err
	}
	// Every bucket key of the partition starts with part.
	part := []byte(q.PK + "\x00")
	var after []byte
	if q.Cursor != "" {
		if after, err = decodeCursor(q, part); err != nil {
			return store.Page{}, err
		}
	}
	lo, hi := bounds(q, part)

	var page store.Page
	err = s.db.View(func(tx *bbolt.Tx) error {
		items := tx.Bucket(itemsBucket)
		b := items
		if q.Index != store.Table {
			b = tx.Bucket([]byte(q.Index))
		}
		c := b.Cursor()
		var k, v []byte
		var next func() ([]byte, []byte)
		var in func([]byte) bool
		if q.Desc {
			end := hi
			if after != nil && bytes.Compare(after, end) < 0 {
				end = after
			}
			if k, _ = c.Seek(end); k == nil {
				k, v = c.Last()
			} else {
				k, v = c.Prev()
			}
			next, in = c.Prev, func(k []byte) bool { return bytes.Compare(k, lo) >= 0 }
		} else {
			start := lo
			if after != nil && bytes.Compare(after, start) > 0 {
				start = after
			}
			if k, v = c.Seek(start); after != nil && bytes.Equal(k, after) {
				k, v = c.Next()
			}
			next, in = c.Next, func(k []byte) bool { return bytes.Compare(k, hi) < 0 }
		}
		var last []byte
		for ; k != nil && in(k); k, v = next() {
			if len(page.Items) == limit {
				// k proves that more items follow.
				page.Cursor = encodeCursor(cursor{Index: q.Index, PK: q.PK, After: string(last[len(part):])})
				break
			}
			ik := k
			if q.Index != store.Table {
				// Skip "indexSK 0x00" to reach the primary key.
				rest := k[len(part):]
				ik = rest[bytes.IndexByte(rest, 0)+1:]
				if v = items.Get(ik); v == nil {
					return fmt.Errorf("bolt: %s entry %q has no item", q.Index, k)
				}
			}
			key, err := splitItemKey(ik)
			if err != nil {
				return err
			}
			it, err := decode(key, v)
			if err != nil {
				return err
			}
			page.Items = append(page.Items, it.Projection(q.Index))
			last = k
		}
		return nil
	})
	if err != nil {
		return store.Page{}, err
	}
	return page, nil
}

// bounds returns the bucket key range [lo, hi) of q's partition and sort-key
// restriction.
func bounds(q store.Query, part []byte) (lo, hi []byte) {
	// At most one of SKFrom and SKPrefix is set.
	lo = append(bytes.Clone(part), q.SKFrom+q.SKPrefix...)
	switch {
	case q.SKTo != "":
		// Keys contain no 0x00, so every sort key up to SKTo inclusive, and
		// no greater one, sorts before SKTo 0x01.
		hi = append(append(bytes.Clone(part), q.SKTo...), 1)
	case q.SKPrefix != "":
		// Valid UTF-8 never contains 0xff, so incrementing the last byte
		// gives the least key above every key with the prefix.
		hi = append(bytes.Clone(part), q.SKPrefix...)
		hi[len(hi)-1]++
	default:
		// The end of the partition.
		hi = append([]byte(q.PK), 1)
	}
	return lo, hi
}
