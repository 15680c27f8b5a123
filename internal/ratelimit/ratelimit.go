// Package ratelimit counts requests in fixed windows against a limit: per
// API key, per client address, per sign-in, per tracking link and address.
// Shared counts in the store, across every instance that shares it; Local
// counts in this process, for a process that is the only one serving from
// its store.
//
// # Shared counters
//
// A bucket's count in a window is spread over shards: one item for limits
// up to ShardRate requests a second, and one more per ShardRate above
// that (at most MaxShards), so that no item takes more writes a second
// than one DynamoDB partition serves (1,000) even at twice the limit. Each
// shard admits its share of the limit (the shares sum to the limit) with a
// conditional increment, so the requests admitted in a window, by every
// instance together, are never more than the limit.
//
// A request counts in a shard picked at random; one that finds its shard
// full tries another, at most MaxTries in all. An instance remembers, per
// bucket and window, the shards it has seen full (the one that takes a
// shard's last place, or a write refused because the shard is full), and
// picks only among the others; once it knows every shard full it refuses
// without a write. A failed conditional write costs a write unit like one
// that succeeds, so a bucket that is over its limit costs each instance at
// most one write per shard per window, however many requests it refuses.
//
// How close to the limit it admits: a request is refused either when its
// instance knows every shard full (so the limit is reached) or after
// finding MaxTries shards full that it did not know were full when it
// picked them, each of which its instance then remembers. In a window
// whose limit is never reached at least one shard never fills, so each
// sequence of requests served one after another (a Lambda instance's)
// has at most ⌊(shards−1)/MaxTries⌋ refused in it. With C requests in
// flight at once across the instances, the requests admitted in a window
// are therefore at least min(limit, offered − C·⌊(shards−1)/MaxTries⌋) and
// at most the limit: exact for limits of up to MaxTries shards (1,500 a
// second); for a key allowed 10,000 a second (20 shards) served by 200
// concurrent Lambda invocations, at most 1,200 of 600,000 a minute short
// (0.2 %), and only when the key offers about its limit: one that offers
// more than its limit plus that is admitted exactly its limit.
package ratelimit

import (
	"context"
	"math"
	"math/bits"
	"math/rand/v2"
	"time"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Decision is the outcome of counting one request against a limit.
type Decision struct {
	Allowed   bool
	Limit     int
	Remaining int
	Reset     time.Time     // when the current window ends
	Wait      time.Duration // until Reset
}

// Window is the window of Allow.
const Window = time.Minute

// decision is the Decision before counting: the window that now falls in.
func decision(now time.Time, limit int, per time.Duration) (Decision, time.Time) {
	window := now.Truncate(per)
	return Decision{Limit: limit, Reset: window.Add(per), Wait: window.Add(per).Sub(now)}, window
}

// Sharding of Shared's counters.
const (
	// ShardRate is the requests a second one shard carries at the limit:
	// half of what one DynamoDB partition writes, so that a burst at twice
	// the limit (a window's quota used in its first half) still fits.
	ShardRate = 500
	// MaxShards bounds the shards of a bucket (one bit each in the cache
	// of full shards): 32,000 requests a second at ShardRate.
	MaxShards = 64
	// MaxTries is how many shards one request tries at most before it is
	// refused: it bounds a request's writes and its latency.
	MaxTries = 3
)

// shards is how many shards count a bucket of limit requests per window.
func shards(limit int, per time.Duration) int {
	n := int(math.Ceil(float64(limit) / per.Seconds() / ShardRate))
	return min(max(n, 1), MaxShards)
}

// share is shard i's part of limit among n shards: the shares sum to limit.
func share(limit, n, i int) int64 {
	q := limit / n
	if i < limit%n {
		q++
	}
	return int64(q)
}

// Shared counts in conditional counters of the store: never more than the
// limit across every instance sharing it (see the package doc). A refused
// request is not counted.
type Shared struct {
	db   *records.DB
	full *fullShards
}

// NewShared returns the limits counted in db.
func NewShared(db *records.DB) *Shared { return &Shared{db: db, full: newFullShards(fullMax)} }

// Allow counts one request of bucket (an API key, a client IP) against
// limit requests per minute.
func (s *Shared) Allow(ctx context.Context, bucket string, limit int) (Decision, error) {
	return s.AllowPer(ctx, bucket, limit, Window)
}

// AllowPer is Allow with fixed windows of the given length (aligned to the
// Unix epoch), for limits such as sign-in attempts per quarter hour.
//
// Remaining is exact for a bucket of one shard; for more, it is the
// shard's remaining places scaled to the whole limit, which assumes the
// other shards as full as this one (they are, within a few percent, since
// requests pick shards at random). A refused request has Remaining 0.
func (s *Shared) AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (Decision, error) {
	d, window := decision(s.db.Clock(), limit, per)
	n := shards(limit, per)
	fk := fullKey{bucket: bucket, window: window.UnixNano(), per: per, limit: limit}
	all := ^uint64(0) >> (64 - n)
	known := s.full.get(fk)
	for tries := 0; tries < MaxTries && known != all; tries++ {
		shard := pick(all&^known, n)
		q := share(limit, n, shard)
		it, err := s.db.Update(ctx, store.Op{
			Kind:      store.OpUpdate,
			Key:       keys.RateShard(bucket, window.Unix(), shard),
			Add:       map[string]int64{"n": 1},
			ExpiresAt: d.Reset.Add(time.Hour).Unix(),
			Conds:     []store.Cond{store.NumLess("n", q)},
		})
		if _, failed := store.FailedOp(err); failed {
			known = s.full.mark(fk, d.Reset, shard)
			continue
		}
		if err != nil {
			return d, err
		}
		count := it.Nums["n"]
		if count >= q { // this request took the shard's last place
			s.full.mark(fk, d.Reset, shard)
		}
		d.Allowed = true
		d.Remaining = int(max(q-count, 0) * int64(limit) / q)
		return d, nil
	}
	return d, nil
}

// pick returns one of the shards whose bit is set in free (not empty), at
// random.
func pick(free uint64, n int) int {
	if n == 1 {
		return 0
	}
	skip := rand.IntN(bits.OnesCount64(free))
	for range skip {
		free &= free - 1 // drop the lowest set bit
	}
	return bits.TrailingZeros64(free)
}
