// Package bolt implements store.Store on an embedded bbolt file, for local
// development and single-node deployments.
//
// Layout: bucket "items" maps pk 0x00 sk to the encoded item; buckets "gsi1",
// "gsi2" and "gsi3" hold one empty-valued entry per indexed item, keyed
// indexPK 0x00 indexSK 0x00 pk 0x00 sk, so an index partition is a
// contiguous, correctly ordered key range; bucket "ttl" holds one entry per
// expiring item, keyed by the big-endian expiry time followed by pk 0x00 sk,
// so the sweep reads expired items first. Keys therefore must not contain
// 0x00. Every write keeps the index and TTL entries in the same bbolt
// transaction as the item.
package bolt

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"

	"github.com/tally-hq/tally/internal/store"
)

// ErrLocked means another process (or another Store in this one) has the
// file open. It wraps bbolt's lock timeout error.
var ErrLocked = fmt.Errorf("bolt: store is locked by another process: %w", bberrors.ErrTimeout)

// lockTimeout bounds the wait for the file lock, so a second process fails
// fast instead of hanging.
const lockTimeout = time.Second

// sweepEvery is how often expired items are deleted.
const sweepEvery = time.Minute

var (
	itemsBucket = []byte("items")
	ttlBucket   = []byte("ttl")
)

// Store is a store.Store backed by one bbolt file. It is safe for concurrent
// use; one goroutine makes every write (see committer), so Transact never
// returns store.ErrConflict.
type Store struct {
	db *bbolt.DB

	writes    chan *pendingWrite // to the committer; unbuffered
	stop      chan struct{}      // closed by Close to end the sweep and the committer
	done      chan struct{}      // closed when the sweep has ended
	committed chan struct{}      // closed when the committer has ended
	closeOnce sync.Once
	closeErr  error
}

// ErrClosed answers a write that comes after Close.
var ErrClosed = errors.New("bolt: store is closed")

var _ store.Store = (*Store)(nil)

// Option changes how Open opens a store.
type Option func(*options)

type options struct{ sweep time.Duration }

// WithSweep deletes expired items every interval instead of every minute.
func WithSweep(every time.Duration) Option { return func(o *options) { o.sweep = every } }

// WithoutSweep keeps expired items: for tests whose clock is not the real
// one, which the sweep goes by.
func WithoutSweep() Option { return func(o *options) { o.sweep = 0 } }

// Open opens the store at path, creating the file and its directory when
// missing. It returns an error matching ErrLocked when the file stays locked
// for about a second.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{sweep: sweepEvery}
	for _, opt := range opts {
		opt(&o)
	}
	return open(path, o.sweep)
}

// open is Open with the TTL sweep interval (0: none) as a parameter.
func open(path string, sweep time.Duration) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("bolt: %w", err)
	}
	opts := *bbolt.DefaultOptions
	opts.Timeout = lockTimeout
	// As etcd does: the freelist is rebuilt from the pages when the file
	// is opened instead of written by every commit (a page or more, and a
	// merge of every free page id, per commit), and kept in maps, whose
	// allocations do not slow down as the file collects free pages.
	opts.NoFreelistSync = true
	opts.FreelistType = bbolt.FreelistMapType
	db, err := bbolt.Open(path, 0o600, &opts)
	if errors.Is(err, bberrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range append([][]byte{itemsBucket, ttlBucket}, indexBuckets...) {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("bolt: init %s: %w", path, err)
	}
	s := &Store{db: db, writes: make(chan *pendingWrite), stop: make(chan struct{}), done: make(chan struct{}), committed: make(chan struct{})}
	go s.sweepLoop(sweep)
	go s.committer()
	return s, nil
}

// Close stops the TTL sweep and closes the file, waiting for running
// transactions. Calling it again returns the first result.
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
	err := s.db.View(func(tx *bbolt.Tx) error {
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

// step is one operation of a write: what prepare works out before the
// committer takes the write, and what plan adds, the entry of its item in
// the round and, for a put or an update, the item as it will be.
type step struct {
	op  *store.Op
	key []byte // the items bucket key of op's target
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
				return nil, fmt.Errorf("bolt: encode item: %w", err)
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
	if len(op.Set) > 0 && len(it.Bins) > 0 { // a Set deletes bytes of its name
		it.Bins = cloneWithRoom(it.Bins, 0)
	}
	for name, v := range op.Set {
		// Like DynamoDB's SET, a string replaces a number or bytes of that name.
		delete(it.Nums, name)
		delete(it.Bins, name)
		it.Attrs[name] = v
	}
	for name, d := range op.Add {
		if _, ok := it.Attrs[name]; ok {
			return store.Item{}, fmt.Errorf("bolt: cannot add to string attribute %q", name)
		}
		if _, ok := it.Bins[name]; ok {
			return store.Item{}, fmt.Errorf("bolt: cannot add to binary attribute %q", name)
		}
		n := it.Nums[name]
		sum := n + d
		if (d > 0 && sum < n) || (d < 0 && sum > n) {
			return store.Item{}, fmt.Errorf("bolt: counter %q overflows int64", name)
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
// when name holds a string or bytes, which no numeric comparison matches (as in
// DynamoDB).
func num(it store.Item, name string) (int64, bool) {
	if _, ok := it.Attrs[name]; ok {
		return 0, false
	}
	if _, ok := it.Bins[name]; ok {
		return 0, false
	}
	return it.Nums[name], true
}
