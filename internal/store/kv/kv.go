// Package kv implements store.Store on an ordered key-value engine, the
// part the embedded engines share (internal/store/bolt on bbolt,
// internal/store/pebble on Pebble): the item codec, the key layout, the
// committer that groups writes into rounds, queries, cursors and the TTL
// sweep. An engine provides transactions over five ordered buckets (Engine).
//
// Layout: bucket Items maps pk 0x00 sk to the encoded item; buckets GSI1,
// GSI2 and GSI3 hold one empty-valued entry per indexed item, keyed
// indexPK 0x00 indexSK 0x00 pk 0x00 sk, so an index partition is a
// contiguous, correctly ordered key range; bucket TTL holds one entry per
// expiring item, keyed by the big-endian expiry time followed by pk 0x00 sk,
// so the sweep reads expired items first. Keys therefore must not contain
// 0x00. Every write keeps the index and TTL entries in the same transaction
// as the item.
package kv

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// Bucket is one ordered key space of an engine.
type Bucket uint8

const (
	Items Bucket = iota
	GSI1
	GSI2
	GSI3
	TTL
)

// Buckets lists every bucket.
var Buckets = []Bucket{Items, GSI1, GSI2, GSI3, TTL}

// indexBucket is the bucket of the i-th of store.Indexes.
func indexBucket(i int) Bucket { return GSI1 + Bucket(i) }

func (b Bucket) String() string {
	switch b {
	case Items:
		return "items"
	case TTL:
		return "ttl"
	}
	return string(store.Indexes[b-GSI1])
}

// Reader reads a consistent state of the buckets.
type Reader interface {
	// Get returns the value at key, nil when absent. It stays valid until
	// the next Get or the end of the transaction.
	Get(b Bucket, key []byte) ([]byte, error)
	// Cursor returns a cursor over b, valid until the end of the
	// transaction.
	Cursor(b Bucket) Cursor
}

// Cursor walks a bucket in key order, as bbolt's does. Each method returns
// the entry it lands on, a nil key past either end; what it returns stays
// valid until the cursor moves.
type Cursor interface {
	Seek(key []byte) (k, v []byte) // the first entry at or after key
	First() (k, v []byte)
	Last() (k, v []byte)
	Next() (k, v []byte)
	Prev() (k, v []byte)
}

// Tx is a write transaction: its reads see what was committed before it
// (not necessarily its own writes, which no caller reads back).
type Tx interface {
	Reader
	Put(b Bucket, key, val []byte) error
	Delete(b Bucket, key []byte) error
}

// Engine runs transactions. Update commits durably (synced) when fn
// returns nil and discards fn's writes otherwise; only one Update runs at a
// time. Close is called once, after the last transaction.
type Engine interface {
	View(fn func(Reader) error) error
	Update(fn func(Tx) error) error
	Close() error
}

// ErrClosed answers a write that comes after Close.
var ErrClosed = errors.New("store: store is closed")

// ErrLocked means another process (or another Store in this one) has the
// store open. The engines' errors wrap it.
var ErrLocked = errors.New("store: store is locked by another process")

// sweepEvery is how often expired items are deleted by default.
const sweepEvery = time.Minute

// Store is a store.Store on an Engine. It is safe for concurrent use; one
// goroutine makes every write (see committer), so Transact never returns
// store.ErrConflict.
type Store struct {
	db Engine

	writes    chan *pendingWrite // to the committer; unbuffered
	stop      chan struct{}      // closed by Close to end the sweep and the committer
	done      chan struct{}      // closed when the sweep has ended
	committed chan struct{}      // closed when the committer has ended
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// Option changes how New sets up a store.
type Option func(*options)

type options struct{ sweep time.Duration }

// WithSweep deletes expired items every interval instead of every minute.
func WithSweep(every time.Duration) Option { return func(o *options) { o.sweep = every } }

// WithoutSweep keeps expired items: for tests whose clock is not the real
// one, which the sweep goes by.
func WithoutSweep() Option { return func(o *options) { o.sweep = 0 } }

// New returns a store on db, which it closes when the store is closed.
func New(db Engine, opts ...Option) *Store {
	o := options{sweep: sweepEvery}
	for _, opt := range opts {
		opt(&o)
	}
	s := &Store{db: db, writes: make(chan *pendingWrite), stop: make(chan struct{}), done: make(chan struct{}), committed: make(chan struct{})}
	go s.sweepLoop(o.sweep)
	go s.committer()
	return s
}

// Close stops the TTL sweep and the committer and closes the engine.
// Calling it again returns the first result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		<-s.committed
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// Get returns the item at key, or store.ErrNotFound.
func (s *Store) Get(ctx context.Context, key store.Key) (store.Item, error) {
	if err := ctx.Err(); err != nil {
		return store.Item{}, err
	}
	if err := store.ValidateKey(key); err != nil {
		return store.Item{}, err
	}
	var it store.Item
	err := s.db.View(func(tx Reader) error {
		var ok bool
		var err error
		it, ok, err = load(tx, itemKey(key), key, allParts)
		if err == nil && !ok {
			err = store.ErrNotFound
		}
		return err
	})
	return it, err
}

// Transact applies ops atomically: it evaluates every operation's
// conditions first and writes nothing unless all hold.
func (s *Store) Transact(ctx context.Context, ops ...store.Op) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := store.ValidateOps(ops); err != nil {
		return err
	}
	_, err := s.write(ctx, ops)
	return err
}

// Update applies a single OpUpdate and returns the item after it.
func (s *Store) Update(ctx context.Context, op store.Op) (store.Item, error) {
	if err := ctx.Err(); err != nil {
		return store.Item{}, err
	}
	if err := store.ValidateUpdate(op); err != nil {
		return store.Item{}, err
	}
	return s.write(ctx, []store.Op{op})
}

// itemKey is the Items bucket key of k: pk 0x00 sk.
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
		return store.Key{}, fmt.Errorf("store: corrupt item key %q", b)
	}
	return store.Key{PK: string(pk), SK: string(sk)}, nil
}

// indexEntry is the index bucket key placing the item at Items bucket key
// key at ik: indexPK 0x00 indexSK 0x00 pk 0x00 sk.
func indexEntry(ik store.IndexKey, key []byte) []byte {
	b := make([]byte, 0, len(ik.PK)+len(ik.SK)+2+len(key))
	b = append(b, ik.PK...)
	b = append(b, 0)
	b = append(b, ik.SK...)
	b = append(b, 0)
	return append(b, key...)
}

// ttlEntry is the TTL bucket key of the item with Items bucket key key
// expiring at exp (> 0): the big-endian time orders entries by expiry.
func ttlEntry(exp int64, key []byte) []byte {
	return append(binary.BigEndian.AppendUint64(make([]byte, 0, 8+len(key)), uint64(exp)), key...)
}

// load reads the parts want of the item k at Items bucket key key; ok is
// false when there is none.
func load(tx Reader, key []byte, k store.Key, want parts) (it store.Item, ok bool, err error) {
	v, err := tx.Get(Items, key)
	if v == nil || err != nil {
		return store.Item{}, false, err
	}
	it, err = decodeParts(k, v, want)
	return it, err == nil, err
}

// write stores it, encoded as v at Items bucket key key, in place of old
// (the zero Item when there was none).
func write(tx Tx, key []byte, old, it store.Item, v []byte) error {
	if err := tx.Put(Items, key, v); err != nil {
		return err
	}
	return reindex(tx, key, old, it)
}

// remove deletes the item it at Items bucket key key with its index and
// TTL entries.
func remove(tx Tx, key []byte, it store.Item) error {
	if err := reindex(tx, key, it, store.Item{}); err != nil {
		return err
	}
	return tx.Delete(Items, key)
}

// reindex replaces the index and TTL entries of the item at Items bucket
// key key, as they were for was, with those of is (a zero Item has none).
// Entries that stay the same are left alone: an update of a counter
// touches no index entry.
func reindex(tx Tx, key []byte, was, is store.Item) error {
	for i, ix := range store.Indexes {
		from, to := was.IndexKey(ix), is.IndexKey(ix)
		if from == to {
			continue
		}
		if from.PK != "" {
			if err := tx.Delete(indexBucket(i), indexEntry(from, key)); err != nil {
				return err
			}
		}
		if to.PK != "" {
			if err := tx.Put(indexBucket(i), indexEntry(to, key), nil); err != nil {
				return err
			}
		}
	}
	if was.ExpiresAt == is.ExpiresAt {
		return nil
	}
	if was.ExpiresAt > 0 {
		if err := tx.Delete(TTL, ttlEntry(was.ExpiresAt, key)); err != nil {
			return err
		}
	}
	if is.ExpiresAt > 0 {
		return tx.Put(TTL, ttlEntry(is.ExpiresAt, key), nil)
	}
	return nil
}

// step is one operation of a write: what prepare works out before the
// committer takes the write, and what plan adds, the entry of its item in
// the round and, for a put or an update, the item as it will be.
type step struct {
	op  *store.Op
	key []byte // the Items bucket key of op's target
	val []byte // a put's encoded item

	entry *entry
	next  store.Item
}

// prepare turns ops into steps with their keys and encoded puts, outside
// the committer, which does every write of the store one after another.
func prepare(ops []store.Op) ([]step, error) {
	steps := make([]step, len(ops))
	for i := range ops {
		op := &ops[i]
		steps[i] = step{op: op, key: itemKey(op.Target())}
		if op.Kind == store.OpPut {
			v, err := encode(op.Item)
			if err != nil {
				return nil, fmt.Errorf("store: encode item: %w", err)
			}
			steps[i].val = v
		}
	}
	return steps, nil
}

// partsFor is what a write reads of the item an op of kind k acts on.
func partsFor(k store.OpKind) parts {
	switch k {
	case store.OpCheck:
		return 0
	case store.OpUpdate:
		return allParts
	}
	return entryParts
}

// updated returns old (or a new item with op's key when it does not exist)
// with op's Set, Add and ExpiresAt applied. The maps it changes are copies:
// old stays as it is in the round (and in what an earlier Update returned).
func updated(old store.Item, exists bool, op store.Op) (store.Item, error) {
	it := old
	if !exists {
		it = store.Item{Key: op.Key}
	}
	if len(op.Set) > 0 {
		it.Attrs = cloneWithRoom(it.Attrs, len(op.Set))
	}
	if len(op.Add) > 0 || (len(op.Set) > 0 && len(it.Nums) > 0) { // a Set deletes a number of its name
		it.Nums = cloneWithRoom(it.Nums, len(op.Add))
	}
	for name, v := range op.Set {
		// Like DynamoDB's SET, a string replaces a number of that name.
		delete(it.Nums, name)
		it.Attrs[name] = v
	}
	for name, d := range op.Add {
		if _, ok := it.Attrs[name]; ok {
			return store.Item{}, fmt.Errorf("store: cannot add to string attribute %q", name)
		}
		n := it.Nums[name]
		sum := n + d
		if (d > 0 && sum < n) || (d < 0 && sum > n) {
			return store.Item{}, fmt.Errorf("store: counter %q overflows int64", name)
		}
		it.Nums[name] = sum
	}
	if op.ExpiresAt != 0 {
		it.ExpiresAt = op.ExpiresAt
	}
	return it, nil
}

// cloneWithRoom copies m into a map with room for n more entries.
func cloneWithRoom[V any](m map[string]V, n int) map[string]V {
	c := make(map[string]V, len(m)+n)
	maps.Copy(c, m)
	return c
}

// holds reports whether c holds for it (the zero Item when !exists).
func holds(c store.Cond, it store.Item, exists bool) bool {
	switch c.Kind {
	case store.CondExists:
		return exists
	case store.CondNotExists:
		return !exists
	case store.CondAttrEquals:
		v, ok := it.Attrs[c.Attr]
		return ok && v == c.S
	case store.CondNumLess:
		n, ok := num(it, c.Attr)
		return ok && n < c.N
	case store.CondNumEquals:
		n, ok := num(it, c.Attr)
		return ok && n == c.N
	}
	return false
}

// num returns the numeric attribute name, 0 when absent. It reports false
// when name holds a string, which no numeric comparison matches (as in
// DynamoDB).
func num(it store.Item, name string) (int64, bool) {
	if _, ok := it.Attrs[name]; ok {
		return 0, false
	}
	return it.Nums[name], true
}
