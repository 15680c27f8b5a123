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

// indexEntry is the index bucket key placing item k at ik:
// indexPK 0x00 indexSK 0x00 pk 0x00 sk.
func indexEntry(ik store.IndexKey, k store.Key) []byte {
	b := make([]byte, 0, len(ik.PK)+len(ik.SK)+len(k.PK)+len(k.SK)+3)
	b = append(b, ik.PK...)
	b = append(b, 0)
	b = append(b, ik.SK...)
	b = append(b, 0)
	return append(b, itemKey(k)...)
}

// ttlEntry is the ttl bucket key of item k expiring at exp (> 0): the
// big-endian time orders entries by expiry.
func ttlEntry(exp int64, k store.Key) []byte {
	b := binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(k.PK)+1+len(k.SK)), uint64(exp))
	return append(b, itemKey(k)...)
}

// indexBuckets returns the names of the GSI buckets.
func indexBuckets() [][]byte {
	names := make([][]byte, len(store.Indexes))
	for i, ix := range store.Indexes {
		names[i] = []byte(ix)
	}
	return names
}

// load reads the item at k; ok is false when there is none.
func load(tx *bbolt.Tx, k store.Key) (it store.Item, ok bool, err error) {
	v := tx.Bucket(itemsBucket).Get(itemKey(k))
	if v == nil {
		return store.Item{}, false, nil
	}
	it, err = decode(k, v)
	return it, err == nil, err
}

// write stores it, replacing old (when exists) together with its index and
// TTL entries.
func write(tx *bbolt.Tx, old store.Item, exists bool, it store.Item) error {
	if exists {
		if err := unindex(tx, old); err != nil {
			return err
		}
	}
	v, err := encode(it)
	if err != nil {
		return fmt.Errorf("bolt: encode item: %w", err)
	}
	if err := tx.Bucket(itemsBucket).Put(itemKey(it.Key), v); err != nil {
		return err
	}
	for _, ix := range store.Indexes {
		if ik := it.IndexKey(ix); ik.PK != "" {
			if err := tx.Bucket([]byte(ix)).Put(indexEntry(ik, it.Key), nil); err != nil {
				return err
			}
		}
	}
	if it.ExpiresAt > 0 {
		return tx.Bucket(ttlBucket).Put(ttlEntry(it.ExpiresAt, it.Key), nil)
	}
	return nil
}

// remove deletes it with its index and TTL entries.
func remove(tx *bbolt.Tx, it store.Item) error {
	if err := unindex(tx, it); err != nil {
		return err
	}
	return tx.Bucket(itemsBucket).Delete(itemKey(it.Key))
}

// unindex deletes the index and TTL entries of it.
func unindex(tx *bbolt.Tx, it store.Item) error {
	for _, ix := range store.Indexes {
		if ik := it.IndexKey(ix); ik.PK != "" {
			if err := tx.Bucket([]byte(ix)).Delete(indexEntry(ik, it.Key)); err != nil {
				return err
			}
		}
	}
	if it.ExpiresAt > 0 {
		return tx.Bucket(ttlBucket).Delete(ttlEntry(it.ExpiresAt, it.Key))
	}
	return nil
}
