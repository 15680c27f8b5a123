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
