// Package pebble implements store.Store on Pebble, an LSM engine: package
// kv on one Pebble key space, each key prefixed with its kv.Bucket's byte.
// A commit appends the round's batch to the write-ahead log and syncs it
// once; memtables reach the disk later as sorted, compressed files written
// front to back.
//
// The committer of package kv is the only writer, so a round reads what is
// committed straight from the DB and writes into one Batch, committed with
// pebble.Sync. Readers use a snapshot each, so a query's index entries and
// items agree.
package pebble

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/tally-hq/tally/internal/store/kv"
)

// ErrLocked means another process (or another Store in this one) has the
// directory open. It wraps kv.ErrLocked.
var ErrLocked = fmt.Errorf("pebble: %w", kv.ErrLocked)

// lockTimeout bounds the wait for the directory lock, so a second process
// fails fast instead of hanging.
const lockTimeout = time.Second

// memTableSize: Pebble's default of 4 MB flushes a memtable every few
// seconds under load; a larger one flushes less often and lets more
// short-lived entries (TTL and index entries replaced soon) die in memory.
const memTableSize = 64 << 20

// Open opens the store in directory dir, creating it when missing. It
// returns an error matching ErrLocked when the directory stays locked for
// about a second.
func Open(dir string, opts ...kv.Option) (*kv.Store, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pebble: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	cache := pebble.NewCache(64 << 20)
	defer cache.Unref() // the DB holds its own reference
	o := &pebble.Options{
		Lock:               lock,
		Cache:              cache,
		MemTableSize:       memTableSize,
		FormatMajorVersion: pebble.FormatNewest,
		Logger:             quiet{},
	}
	// Most writes check that a new key is absent (an idempotency marker, a
	// new record): without a filter each such read searched every file
	// whose range covered the key, a quarter of the CPU under load.
	// Later levels inherit L0's filter.
	o.Levels[0].FilterPolicy = bloom.FilterPolicy(10)
	db, err := pebble.Open(dir, o)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("pebble: open %s: %w", dir, err)
	}
	return kv.New(&engine{db: db, lock: lock}, opts...), nil
}

// lockDir takes dir's lock, trying for lockTimeout.
func lockDir(dir string) (*pebble.Lock, error) {
	deadline := time.Now().Add(lockTimeout)
	for {
		lock, err := pebble.LockDirectory(dir, vfs.Default)
		if err == nil {
			return lock, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %s (%v)", ErrLocked, dir, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// quiet drops Pebble's informational messages (flushes, compactions).
type quiet struct{}

func (quiet) Infof(string, ...any)           {}
func (quiet) Errorf(format string, a ...any) { pebble.DefaultLogger.Errorf(format, a...) }
func (quiet) Fatalf(format string, a ...any) { pebble.DefaultLogger.Fatalf(format, a...) }

// engine is kv.Engine on a Pebble DB.
type engine struct {
	db   *pebble.DB
	lock *pebble.Lock
	mu   sync.Mutex // held by Update: one writer at a time

	// Pebble panics on reads after Close: closing waits for the readers
	// and makes later ones fail.
	closing sync.RWMutex
	closed  bool
}

// ErrClosed answers a read after Close.
var ErrClosed = fmt.Errorf("pebble: %w", kv.ErrClosed)

func (e *engine) View(fn func(kv.Reader) error) error {
	e.closing.RLock()
	defer e.closing.RUnlock()
	if e.closed {
		return ErrClosed
	}
	snap := e.db.NewSnapshot()
	defer snap.Close()
	r := reader{r: snap}
	err := fn(&r)
	return errors.Join(err, r.release())
}

func (e *engine) Update(fn func(kv.Tx) error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	b := e.db.NewBatch()
	defer b.Close()
	t := tx{reader: reader{r: e.db}, b: b}
	if err := errors.Join(fn(&t), t.release()); err != nil {
		return err
	}
	if b.Empty() {
		return nil
	}
	return b.Commit(pebble.Sync)
}

func (e *engine) Close() error {
	e.closing.Lock()
	defer e.closing.Unlock()
	e.closed = true
	return errors.Join(e.db.Close(), e.lock.Close())
}

// reader is kv.Reader on the DB or a snapshot.
type reader struct {
	r      pebble.Reader
	key    []byte    // scratch for prefixed keys
	closer io.Closer // of the last Get's value
	iters  []*pebble.Iterator
	err    error // of a cursor that could not be made
}

// prefixed returns b's byte followed by key, in scratch space that the
// next call reuses (Pebble copies what it keeps).
func (r *reader) prefixed(b kv.Bucket, key []byte) []byte {
	r.key = append(append(r.key[:0], byte(b)), key...)
	return r.key
}

func (r *reader) Get(b kv.Bucket, key []byte) ([]byte, error) {
	if r.closer != nil {
		r.closer.Close()
		r.closer = nil
	}
	v, closer, err := r.r.Get(r.prefixed(b, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	r.closer = closer
	if v == nil {
		v = []byte{} // present, and empty
	}
	return v, nil
}

func (r *reader) Cursor(b kv.Bucket) kv.Cursor {
	it, err := r.r.NewIter(&pebble.IterOptions{LowerBound: []byte{byte(b)}, UpperBound: []byte{byte(b) + 1}})
	if err != nil {
		r.err = err
		return errCursor{}
	}
	r.iters = append(r.iters, it)
	return &cursor{it: it, prefix: byte(b)}
}

// release closes what the reader holds and returns the first error an
// iterator met.
func (r *reader) release() error {
	errs := []error{r.err}
	if r.closer != nil {
		errs = append(errs, r.closer.Close())
	}
	for _, it := range r.iters {
		errs = append(errs, it.Close())
	}
	r.closer, r.iters, r.err = nil, nil, nil
	return errors.Join(errs...)
}

// tx is kv.Tx: reads from the DB, writes into the round's batch.
type tx struct {
	reader
	b *pebble.Batch
}

func (t *tx) Put(b kv.Bucket, key, val []byte) error {
	return t.b.Set(t.prefixed(b, key), val, nil)
}

func (t *tx) Delete(b kv.Bucket, key []byte) error {
	return t.b.Delete(t.prefixed(b, key), nil)
}

// cursor is kv.Cursor on an iterator bounded to one bucket.
type cursor struct {
	it     *pebble.Iterator
	prefix byte
	key    []byte
}

func (c *cursor) at(ok bool) ([]byte, []byte) {
	if !ok {
		return nil, nil
	}
	v, err := c.it.ValueAndErr()
	if err != nil {
		return nil, nil // the iterator keeps err for release
	}
	return c.it.Key()[1:], v
}

func (c *cursor) Seek(key []byte) ([]byte, []byte) {
	c.key = append(append(c.key[:0], c.prefix), key...)
	return c.at(c.it.SeekGE(c.key))
}

func (c *cursor) First() ([]byte, []byte) { return c.at(c.it.First()) }
func (c *cursor) Last() ([]byte, []byte)  { return c.at(c.it.Last()) }
func (c *cursor) Next() ([]byte, []byte)  { return c.at(c.it.Next()) }
func (c *cursor) Prev() ([]byte, []byte)  { return c.at(c.it.Prev()) }

// errCursor stands for an iterator that could not be made: it is empty,
// and the reader's release returns the error.
type errCursor struct{}

func (errCursor) Seek([]byte) ([]byte, []byte) { return nil, nil }
func (errCursor) First() ([]byte, []byte)      { return nil, nil }
func (errCursor) Last() ([]byte, []byte)       { return nil, nil }
func (errCursor) Next() ([]byte, []byte)       { return nil, nil }
func (errCursor) Prev() ([]byte, []byte)       { return nil, nil }
