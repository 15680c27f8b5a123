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
// An instance writes a bucket's shards in turn, from one picked at random
// for each window; a request that finds its shard full tries the next, at
// most MaxTries in all. An instance remembers, per bucket and window, the
// shards it has seen full (the one that takes a shard's last place, or a
// write refused because the shard is full), and skips them; once it knows
// every shard full it refuses without a write. A failed conditional write
// costs a write unit like one that succeeds, so a bucket that is over its
// limit costs each instance at most one write per shard per window,
// however many requests it refuses.
//
// # Leases
//
// An instance that serves a bucket often takes several places in one
// write, a lease, and admits its next requests from it without a write. A
// lease is the same conditional increment (by its size, if the shard has
// that many places left), so the places taken, leased or not, never pass
// the limit. It is taken by a request that finds its instance holding no
// places and no other lease's write under way, and it is at most:
//   - MostLeased(limit): 1/64 of the limit and at most 64 places, so no
//     lease below 128 a window (the default RateLimit, 100 a minute, takes
//     a write a request and admits exactly its limit);
//   - the requests its instance has admitted in the window: leases double,
//     1, 1, 2, 4, … places, while the instance keeps serving the bucket;
//   - one more than its instance would admit in the rest of the window at
//     its rate since its first request in it.
//
// A lease that finds fewer places left in its shard takes one place there
// instead, and the instance leases no more from that shard in the window.
// Places leased and not used by the window's end are lost: an instance
// holds at most MostLeased−1 of them at any time, so it loses at most that
// many a window (and those of a window it forgets, past windowsMax).
//
// How close to the limit it admits: a request is refused either when its
// instance knows every shard full or after finding MaxTries shards full
// that it did not know were full when it picked them, each of which its
// instance then remembers. In a window where some shard never fills, each
// sequence of requests served one after another (a Lambda instance's) has
// at most ⌊(shards−1)/MaxTries⌋ refused in it; where every shard fills,
// all the limit's places were taken and only the I instances' unused
// leases were not admitted. With C requests in flight at once, the
// requests admitted in a window are therefore at most the limit and at
// least min(limit − I·(MostLeased−1), offered − C·⌊(shards−1)/MaxTries⌋).
// At the default limit that is exact. For a key allowed 10,000 a second
// (600,000 a minute, 20 shards, leases of up to 64) served by 200 Lambda
// instances, at most 12,600 a minute short (2.1 %) when every instance is
// left with an unused lease, which takes load that stops or moves between
// instances: an instance that keeps serving the key uses its lease.
package ratelimit

import (
	"context"
	"math"
	"math/bits"
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

// Leases.
const (
	// LeaseFraction: a lease is at most this fraction of the limit (1/64),
	// so that the places an instance can lose are few beside it.
	LeaseFraction = 64
	// MaxLease bounds a lease however high the limit: past it, a write
	// takes 1/64 of a request's write unit or less, and a larger lease
	// saves little more than it can lose.
	MaxLease = 64
)

// MostLeased is the most places one write of an instance takes for a
// bucket of limit: limit/LeaseFraction, at most MaxLease, at least 1 (no
// lease: a write per request, up to 127 requests a window). An instance
// holds at most MostLeased−1 places unused at any time, so that many are
// the most it loses in a window.
func MostLeased(limit int) int { return min(max(limit/LeaseFraction, 1), MaxLease) }

// Shared counts in conditional counters of the store: never more than the
// limit across every instance sharing it (see the package doc). A refused
// request is not counted.
type Shared struct {
	db  *records.DB
	mem *windows
}

// NewShared returns the limits counted in db.
func NewShared(db *records.DB) *Shared { return &Shared{db: db, mem: newWindows(windowsMax)} }

// Allow counts one request of bucket (an API key, a client IP) against
// limit requests per minute.
func (s *Shared) Allow(ctx context.Context, bucket string, limit int) (Decision, error) {
	return s.AllowPer(ctx, bucket, limit, Window)
}

// AllowPer is Allow with fixed windows of the given length (aligned to the
// Unix epoch), for limits such as sign-in attempts per quarter hour.
//
// Remaining is exact for a bucket of one shard counted by one instance; for
// more shards, it is the places left in the shard the instance wrote last
// (its lease's included) scaled to the whole limit, which assumes the
// other shards as full as that one (they are, within a few percent, since
// each instance writes its shards in turn). Other instances' leases count
// as taken. A refused request has Remaining 0.
func (s *Shared) AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (Decision, error) {
	now := s.db.Clock()
	d, window := decision(now, limit, per)
	k := windowKey{bucket: bucket, window: window.UnixNano(), per: per, limit: limit}
	t := s.mem.take(k, d.Reset, now, int64(MostLeased(limit)))
	if t.leased {
		d.Allowed, d.Remaining = true, int(t.places*int64(limit)/t.share)
		return d, nil
	}
	if t.size > 1 {
		defer s.mem.endLease(k)
	}
	n := shards(limit, per)
	all := ^uint64(0) >> (64 - n)
	known, size, next := t.full, t.size, t.next
	for tries := 0; tries < MaxTries && known != all; {
		shard := pick(all&^known, next)
		q := share(limit, n, shard)
		take := min(size, q)
		if t.low&(1<<shard) != 0 {
			take = 1
		}
		it, err := s.db.Update(ctx, store.Op{
			Kind:      store.OpUpdate,
			Key:       keys.RateShard(bucket, window.Unix(), shard),
			Add:       map[string]int64{"n": take},
			ExpiresAt: d.Reset.Add(time.Hour).Unix(),
			Conds:     []store.Cond{store.NumLess("n", q-take+1)},
		})
		if _, failed := store.FailedOp(err); failed {
			if take > 1 {
				// Fewer places than the lease: the request takes one, in
				// the same shard, and leases no more there this window.
				t.low, size, next = s.mem.markLow(k, d.Reset, shard), 1, shard
				continue
			}
			known, next = s.mem.mark(k, d.Reset, shard), shard
			tries++
			continue
		}
		if err != nil {
			return d, err
		}
		count := it.Nums["n"]
		s.mem.counted(k, d.Reset, now, shard, take, count, q)
		d.Allowed = true
		d.Remaining = int(max(q-count+take-1, 0) * int64(limit) / q)
		return d, nil
	}
	return d, nil
}

// pick returns the first shard at or after from, in turn, whose bit is set
// in free (not empty).
func pick(free uint64, from int) int {
	if rest := free >> from << from; rest != 0 {
		return bits.TrailingZeros64(rest)
	}
	return bits.TrailingZeros64(free)
}
