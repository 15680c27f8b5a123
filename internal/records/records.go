// Package records is the floor every capability of Tally stands on: Go
// values kept as items of the store (read by key or by id, decoded),
// transactions that ride out conflicts within a budget, lists that merge a
// logical list's shards newest first behind signed cursors, and the
// identifiers of new records.
package records

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// DB is the store as the capabilities use it: the item store itself, the
// clock, how identifiers are drawn, and the keyring that signs list
// cursors.
type DB struct {
	store.Store
	clock      func() time.Time
	ids        IDs
	cursorKeys keyringCache
}

// New returns a DB over st that reads the time from clock and draws
// identifiers with ids.
func New(st store.Store, clock func() time.Time, ids IDs) *DB {
	return &DB{Store: st, clock: clock, ids: ids}
}

// Now returns the current time, in UTC to the millisecond.
func (db *DB) Now() time.Time { return db.clock().UTC().Truncate(time.Millisecond) }

// Clock returns the current time as the clock gives it.
func (db *DB) Clock() time.Time { return db.clock() }

// NewID makes the identifier of a new record (ids.New), placed as the
// DB's IDs place it.
func (db *DB) NewID(prefix string, t time.Time) string { return db.ids.New(prefix, t) }

// DerivedID is the identifier derived from seed (ids.Derived), the same
// for the same seed, placed as the DB's IDs place it.
func (db *DB) DerivedID(prefix string, t time.Time, seed string) string {
	return db.ids.Derived(prefix, t, seed)
}

// IDs places new identifiers in the shards of keys.ShardOf.
type IDs interface {
	New(prefix string, t time.Time) string
	Derived(prefix string, t time.Time, seed string) string
}

// SpreadIDs leaves identifiers where they fall, across every shard: for a
// store whose write throughput is per partition key (DynamoDB).
type SpreadIDs struct{}

func (SpreadIDs) New(prefix string, t time.Time) string { return ids.New(prefix, t) }

func (SpreadIDs) Derived(prefix string, t time.Time, seed string) string {
	return ids.Derived(prefix, t, seed)
}

// ShardZeroIDs draws identifiers until they lie in shard 0: on the embedded
// store the shards spread nothing, and a commit round's items, index and
// queue entries then land in one shard's pages rather than four
// (docs/performance.md). Readers read every shard, so items made before
// stay found.
type ShardZeroIDs struct{}

func (ShardZeroIDs) New(prefix string, t time.Time) string {
	var buf [32]byte // the longest prefix and a ULID
	for {
		if id := ids.Append(buf[:0], prefix, t); keys.Hash(id)%keys.Shards == 0 {
			return string(id)
		}
	}
}

// Derived is the first of the series seed, seed/1, seed/2… whose
// identifier lies in shard 0.
func (ShardZeroIDs) Derived(prefix string, t time.Time, seed string) string {
	for draw := 0; ; draw++ {
		s := seed
		if draw > 0 {
			s += "/" + strconv.Itoa(draw)
		}
		if id := ids.Derived(prefix, t, s); keys.ShardOf(id) == 0 {
			return id
		}
	}
}

// conflictBudget is how long Transact keeps retrying conflicts. Hundreds of
// writers on one hot item (a cap counter, a rollup) need many rounds on a
// busy table; a count of attempts ran out where time would not have.
const conflictBudget = 5 * time.Second

// Transact runs ops, retrying transaction conflicts with jittered backoff:
// they only mean another writer touched the same items at the same moment.
// Conflicts that outlast the budget answer 409, for the client to retry.
func (db *DB) Transact(ctx context.Context, ops ...store.Op) error {
	return Retry(ctx, func() error { return db.Store.Transact(ctx, ops...) })
}

// Update is store.Update, retrying conflicts as Transact does.
func (db *DB) Update(ctx context.Context, op store.Op) (it store.Item, err error) {
	err = Retry(ctx, func() error {
		it, err = db.Store.Update(ctx, op)
		return err
	})
	return it, err
}

// Retry runs write until it returns anything but store.ErrConflict, with
// jittered backoff, for at most conflictBudget; then it answers 409.
func Retry(ctx context.Context, write func() error) error {
	backoff := 5 * time.Millisecond
	start := time.Now()
	for {
		err := write()
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if time.Since(start) > conflictBudget {
			return fmt.Errorf("%w: %w", tally.Errorf(tally.ECodeConflict, "Other requests kept changing the same records; retry the request."), err)
		}
		if err := Sleep(ctx, backoff/2+rand.N(backoff)); err != nil {
			return err
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}
