package kv

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tally-hq/tally/internal/store"
)

// Check reports an error unless the index and TTL buckets hold exactly the
// entries the items call for, with empty values: what every write keeps
// true, for tests and for looking at a store after a crash.
func (s *Store) Check() error {
	want := map[Bucket][]string{}
	got := map[Bucket][]string{}
	err := s.db.View(func(tx Reader) error {
		c := tx.Cursor(Items)
		for k, v := c.First(); k != nil; k, v = c.Next() {
			key, err := splitItemKey(k)
			if err != nil {
				return err
			}
			it, err := decode(key, v)
			if err != nil {
				return err
			}
			for i, ix := range store.Indexes {
				if ik := it.IndexKey(ix); ik.PK != "" {
					want[indexBucket(i)] = append(want[indexBucket(i)], string(indexEntry(ik, k)))
				}
			}
			if it.ExpiresAt > 0 {
				want[TTL] = append(want[TTL], string(ttlEntry(it.ExpiresAt, k)))
			}
		}
		for _, b := range Buckets[1:] {
			c := tx.Cursor(b)
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if len(v) != 0 {
					return fmt.Errorf("%s entry %q has value %q", b, k, v)
				}
				got[b] = append(got[b], string(k))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, b := range Buckets[1:] {
		w, g := want[b], got[b]
		slices.SortFunc(w, strings.Compare)
		if !slices.Equal(w, g) {
			return fmt.Errorf("bucket %s: entries %q, want %q", b, g, w)
		}
	}
	return nil
}
