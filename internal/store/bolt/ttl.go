package bolt

import (
	"bytes"
	"encoding/binary"
	"time"

	"go.etcd.io/bbolt"
)

// sweepBatch caps the items one sweep transaction deletes, so that a large
// backlog does not hold the writer lock for long.
const sweepBatch = 1000

// sweepLoop deletes expired items every interval (0: never) until Close.
func (s *Store) sweepLoop(every time.Duration) {
	defer close(s.done)
	if every <= 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case now := <-t.C:
			// TTL is best effort (see store.Item.ExpiresAt): a failed sweep
			// is simply retried on the next tick.
			_ = s.sweep(now.Unix())
		}
	}
}

// sweep deletes the items whose ExpiresAt is before now, in batches.
// Negative expiry times are never indexed, like DynamoDB ignores times far
// in the past.
func (s *Store) sweep(now int64) error {
	for {
		n := 0
		err := s.db.Update(func(tx *bbolt.Tx) error {
			var keys [][]byte
			c := tx.Bucket(ttlBucket).Cursor()
			for k, _ := c.First(); k != nil && len(keys) < sweepBatch; k, _ = c.Next() {
				if int64(binary.BigEndian.Uint64(k)) >= now {
					break
				}
				keys = append(keys, bytes.Clone(k))
			}
			for _, k := range keys {
				// Deleting the entry first guarantees progress even if it
				// were stale; the item goes only if it really expired.
				if err := tx.Bucket(ttlBucket).Delete(k); err != nil {
					return err
				}
				key, err := splitItemKey(k[8:])
				if err != nil {
					return err
				}
				it, ok, err := load(tx, k[8:], key, entryParts)
				if err != nil {
					return err
				}
				if ok && it.ExpiresAt > 0 && it.ExpiresAt < now {
					if err := remove(tx, k[8:], it); err != nil {
						return err
					}
				}
			}
			n = len(keys)
			return nil
		})
		if err != nil || n < sweepBatch {
			return err
		}
		select {
		case <-s.stop:
			return nil
		default:
		}
	}
}
