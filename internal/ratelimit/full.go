package ratelimit

import (
	"sync"
	"time"
)

// fullMax bounds the windows an instance remembers full shards of. Past
// it, it forgets windows that have ended, then a quarter of the rest: a
// forgotten window costs at most one more write per shard to learn again.
const fullMax = 10_000

// fullKey names one bucket's window (and the limit it is counted against,
// which sets its shards).
type fullKey struct {
	bucket string
	window int64 // Unix nanoseconds of its start
	per    time.Duration
	limit  int
}

type fullEntry struct {
	end  time.Time // the window's end: then it can be forgotten
	mask uint64    // shard i is known full when bit i is set
}

// fullShards remembers, for the windows of the buckets this instance has
// counted, which shards it has seen full: a shard's count only grows in
// its window, so a shard seen full stays full until the window ends.
type fullShards struct {
	max int
	mu  sync.Mutex
	m   map[fullKey]fullEntry
}

func newFullShards(max int) *fullShards {
	return &fullShards{max: max, m: map[fullKey]fullEntry{}}
}

// get returns the shards known full in the window k.
func (f *fullShards) get(k fullKey) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.m[k].mask
}

// mark records shard as full in the window k, which ends at end, and
// returns the shards now known full.
func (f *fullShards) mark(k fullKey, end time.Time, shard int) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	e, ok := f.m[k]
	if !ok && len(f.m) >= f.max {
		f.evict(end.Add(-k.per))
	}
	e.end = end
	e.mask |= 1 << shard
	f.m[k] = e
	return e.mask
}

// evict forgets the windows that ended by now, and when that frees too
// little, a quarter of the others (any: map order).
func (f *fullShards) evict(now time.Time) {
	for k, e := range f.m {
		if !e.end.After(now) {
			delete(f.m, k)
		}
	}
	for k := range f.m {
		if len(f.m) < f.max*3/4 {
			return
		}
		delete(f.m, k)
	}
}

// Reached remembers, for counters kept elsewhere (a click's velocity
// counter, written in the click's transaction), that a counter has
// reached a threshold in its window: a counter only grows in its window,
// so a later request in it need not write to find out. Safe for concurrent
// use; bounded like Shared's memory of full shards.
type Reached struct{ f *fullShards }

// NewReached returns an empty Reached.
func NewReached() *Reached { return &Reached{f: newFullShards(fullMax)} }

// Has reports whether counter is known to have reached n in the window
// [window, window+per).
func (r *Reached) Has(counter string, window time.Time, per time.Duration, n int) bool {
	return r.f.get(fullKey{bucket: counter, window: window.UnixNano(), per: per, limit: n}) != 0
}

// Mark records that counter reached n in the window [window, window+per).
func (r *Reached) Mark(counter string, window time.Time, per time.Duration, n int) {
	r.f.mark(fullKey{bucket: counter, window: window.UnixNano(), per: per, limit: n}, window.Add(per), 0)
}
