package ratelimit

import (
	"context"
	"sync"
	"time"
)

// Local counts requests in this process's memory: for each bucket, the
// count of its current window. It is exact only when no other process
// serves from the same store, which holds for the embedded store (its file
// is locked to one process); it spares every request a write, and so a
// commit, to the store. A restart forgets the current window's counts.
type Local struct {
	clock  func() time.Time
	mu     sync.Mutex
	counts map[string]windowCount
}

type windowCount struct {
	window, end time.Time
	n           int64
}

// NewLocal returns the limits counted in memory, on clock.
func NewLocal(clock func() time.Time) *Local { return &Local{clock: clock} }

// Allow is Shared.Allow, counted in this process.
func (r *Local) Allow(ctx context.Context, bucket string, limit int) (Decision, error) {
	return r.AllowPer(ctx, bucket, limit, Window)
}

// AllowPer is Shared.AllowPer, counted in this process.
func (r *Local) AllowPer(_ context.Context, bucket string, limit int, per time.Duration) (Decision, error) {
	d, window := decision(r.clock(), limit, per)
	n, ok := r.add(bucket, window, d.Reset, int64(limit))
	d.Allowed, d.Remaining = ok, max(limit-int(n), 0)
	return d, nil
}

// localMax bounds memory: past it, buckets whose window has ended are
// dropped.
const localMax = 10_000

// add counts one request of bucket in the window [window, end) unless that
// would pass limit. It returns the count after the request (or the count
// that refused it).
func (r *Local) add(bucket string, window, end time.Time, limit int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]windowCount{}
	}
	c := r.counts[bucket]
	// A request that read the clock just before the window moved on counts
	// in the newer window, which is the stricter choice.
	if window.After(c.window) {
		if len(r.counts) >= localMax {
			for b, old := range r.counts {
				if !old.end.After(window) {
					delete(r.counts, b)
				}
			}
		}
		c = windowCount{window: window, end: end}
	}
	if c.n >= limit {
		return c.n, false
	}
	c.n++
	r.counts[bucket] = c
	return c.n, true
}
