package bolt

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// itemKey is the items bucket key of k: pk 0x00 sk.
func itemKey(k store.Key) []byte {
	b := make([]byte, 0, len(k.PK)+1+len(k.SK))
	b = append(b, k.PK...)
	b = append(b, 0)
	return append(b, k.SK...)
}

// splitItemKey is the inverse of itemKey.
func splitItemKey(b []byte) (store.Key, error) {
	pk, sk, ok := bytes.Cut(b, []byte{0})
	if !ok {
		return store.Key{}, fmt.Errorf("bolt: corrupt item key %q", b)
	}
	return store.Key{PK: string(pk), SK: string(sk)}, nil
}

// indexEntry is the index bucket key placing the item at items bucket key
// key at ik: indexPK 0x00 indexSK 0x00 pk 0x00 sk.
func indexEntry(ik store.IndexKey, key []byte) []byte {
	b := make([]byte, 0, len(ik.PK)+len(ik.SK)+2+len(key))
	b = append(b, ik.PK...)
	b = append(b, 0)
	b = append(b, ik.SK...)
	b = append(b, 0)
	return append(b, key...)
}

// ttlEntry is the ttl bucket key of the item with items bucket key key
// expiring at exp (> 0): the big-endian time orders entries by expiry.
func ttlEntry(exp int64, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(exp)), key...)
}

// indexBuckets are the names of the GSI buckets, in the order of
// store.Indexes.
var indexBuckets = func() [][]byte {
	names := make([][]byte, len(store.Indexes))
	for i, ix := range store.Indexes {
		names[i] = []byte(ix)
	}
	return names
}()

// load reads the parts want of the item k at items bucket key key; ok is
// false when there is none.
func load(tx *bbolt.Tx, key []byte, k store.Key, want parts) (it store.Item, ok bool, err error) {
	v := tx.Bucket(itemsBucket).Get(key)
	if v == nil {
		return store.Item{}, false, nil
	}
	it, err = decodeParts(k, v, want)
	return it, err == nil, err
}

// write stores it, encoded as v at items bucket key key, in place of old
// (the zero Item when there was none).
func write(tx *bbolt.Tx, key []byte, old, it store.Item, v []byte) error {
	if err := writable(tx, itemsBucket).Put(key, v); err != nil {
		return err
	}
	return reindex(tx, key, old, it)
}

// remove deletes the item it at items bucket key key with its index and
// TTL entries.
func remove(tx *bbolt.Tx, key []byte, it store.Item) error {
	if err := reindex(tx, key, it, store.Item{}); err != nil {
		return err
	}
	return tx.Bucket(itemsBucket).Delete(key)
}

// reindex replaces the index and TTL entries of the item at items bucket
// key key, as they were for was, with those of is (a zero Item has none).
// Entries that stay the same are left alone: an update of a counter
// touches no index page.
func reindex(tx *bbolt.Tx, key []byte, was, is store.Item) error {
	for i, ix := range store.Indexes {
		from, to := was.IndexKey(ix), is.IndexKey(ix)
		if from == to {
			continue
		}
		b := writable(tx, indexBuckets[i])
		if from.PK != "" {
			if err := b.Delete(indexEntry(from, key)); err != nil {
				return err
			}
		}
		if to.PK != "" {
			if err := b.Put(indexEntry(to, key), nil); err != nil {
				return err
			}
		}
	}
	if was.ExpiresAt == is.ExpiresAt {
		return nil
	}
	b := writable(tx, ttlBucket)
	if was.ExpiresAt > 0 {
		if err := b.Delete(ttlEntry(was.ExpiresAt, key)); err != nil {
			return err
		}
	}
	if is.ExpiresAt > 0 {
		return b.Put(ttlEntry(is.ExpiresAt, key), nil)
	}
	return nil
}

// writable is bucket name of a write transaction, its pages filled to
// fillPercent when they split.
func writable(tx *bbolt.Tx, name []byte) *bbolt.Bucket {
	b := tx.Bucket(name)
	b.FillPercent = fillPercent
	return b
}

// fillPercent: most keys are appended (time-ordered ids, expiry times), so
// a page split at bbolt's default of half leaves a half-empty page behind
// for good, and a commit writes twice the pages; the 5 % left is room for
// counters whose values grow in place. BenchmarkIngestWithWebhook: 14.1 KB
// written a conversion at 0.5, 11.2 KB at 0.95 (docs/performance.md).
const fillPercent = 0.95
