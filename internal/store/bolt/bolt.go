// Package bolt implements store.Store on an embedded bbolt file, for local
// development and single-node deployments: package kv on bbolt, one bucket
// per kv.Bucket. A commit writes the B+tree pages it changed where bbolt
// finds room, then the meta page, with an fdatasync after each.
package bolt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"

	"github.com/tally-hq/tally/internal/store/kv"
)

// ErrLocked means another process (or another Store in this one) has the
// file open. It wraps kv.ErrLocked and bbolt's lock timeout error.
var ErrLocked = fmt.Errorf("bolt: %w: %w", kv.ErrLocked, bberrors.ErrTimeout)

// lockTimeout bounds the wait for the file lock, so a second process fails
// fast instead of hanging.
const lockTimeout = time.Second

// Option changes how Open opens a store.
type Option = kv.Option

// WithSweep deletes expired items every interval instead of every minute.
func WithSweep(every time.Duration) Option { return kv.WithSweep(every) }

// WithoutSweep keeps expired items: for tests whose clock is not the real
// one, which the sweep goes by.
func WithoutSweep() Option { return kv.WithoutSweep() }

// bucketNames are the bbolt buckets of the kv.Buckets, by index.
var bucketNames = func() [][]byte {
	names := make([][]byte, len(kv.Buckets))
	for _, b := range kv.Buckets {
		names[b] = []byte(b.String())
	}
	return names
}()

// Open opens the store at path, creating the file and its directory when
// missing. It returns an error matching ErrLocked when the file stays locked
// for about a second.
func Open(path string, opts ...Option) (*kv.Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("bolt: %w", err)
	}
	bopts := *bbolt.DefaultOptions
	bopts.Timeout = lockTimeout
	// As etcd does: the freelist is rebuilt from the pages when the file
	// is opened instead of written by every commit (a page or more, and a
	// merge of every free page id, per commit), and kept in maps, whose
	// allocations do not slow down as the file collects free pages.
	bopts.NoFreelistSync = true
	bopts.FreelistType = bbolt.FreelistMapType
	db, err := bbolt.Open(path, 0o600, &bopts)
	if errors.Is(err, bberrors.ErrTimeout) {
		return nil, fmt.Errorf("%w: %s", ErrLocked, path)
	}
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	err = db.Update(func(tx *bbolt.Tx) error {
		for _, name := range bucketNames {
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
	return kv.New(engine{db}, opts...), nil
}

// engine is kv.Engine on a bbolt file.
type engine struct{ db *bbolt.DB }

func (e engine) View(fn func(kv.Reader) error) error {
	return e.db.View(func(t *bbolt.Tx) error { return fn(tx{t}) })
}

func (e engine) Update(fn func(kv.Tx) error) error {
	return e.db.Update(func(t *bbolt.Tx) error { return fn(tx{t}) })
}

func (e engine) Close() error { return e.db.Close() }

// tx is kv.Tx on a bbolt transaction.
type tx struct{ t *bbolt.Tx }

func (t tx) bucket(b kv.Bucket) *bbolt.Bucket { return t.t.Bucket(bucketNames[b]) }

func (t tx) Get(b kv.Bucket, key []byte) ([]byte, error) { return t.bucket(b).Get(key), nil }

func (t tx) Cursor(b kv.Bucket) kv.Cursor { return t.bucket(b).Cursor() }

func (t tx) Put(b kv.Bucket, key, val []byte) error {
	bk := t.bucket(b)
	bk.FillPercent = fillPercent
	return bk.Put(key, val)
}

func (t tx) Delete(b kv.Bucket, key []byte) error { return t.bucket(b).Delete(key) }

// fillPercent: most keys are appended (time-ordered ids, expiry times), so
// a page split at bbolt's default of half leaves a half-empty page behind
// for good, and a commit writes twice the pages; the 5 % left is room for
// counters whose values grow in place. BenchmarkIngestWithWebhook: 14.1 KB
// written a conversion at 0.5, 11.2 KB at 0.95 (docs/performance.md).
const fillPercent = 0.95
