package ratelimit

import (
	"math/rand/v2"
	"sync"
	"time"
)

// windowsMax bounds the windows an instance remembers. Past it, it
// forgets windows that have ended, then a quarter of the rest: a forgotten
// window costs at most one more write per shard to learn again, and the
// places left in its lease.
const windowsMax = 10_000

// windowKey names one bucket's window (and the limit it is counted
// against, which sets its shards).
type windowKey struct {
	bucket string
	window int64 // Unix nanoseconds of its start
	per    time.Duration
	limit  int
}

// window is what an instance knows of one bucket's window. A shard's count
// only grows in its window, so a shard seen full stays full, and one seen
// with too few places for a lease stays so, until the window ends.
type window struct {
	end  time.Time // the window's end: then it can be forgotten
	full uint64    // shard i is known full when bit i is set
	low  uint64    // shard i had fewer places than a lease asked: it takes one at a time
	next int       // the shard to write next, when not known full

	served int64     // requests this instance admitted in the window
	first  time.Time // when it admitted the first
	left   int64     // places its lease holds, taken and not yet used
	free   int64     // places the lease's shard had left after the lease's write
	share  int64     // that shard's share of the limit
	taking bool      // a lease's write is under way
}

// windows remembers, for the windows of the buckets this instance has
// counted, the shards it has seen full or low and its lease. Safe for
// concurrent use.
type windows struct {
	max int
	mu  sync.Mutex
	m   map[windowKey]*window
}

func newWindows(max int) *windows {
	return &windows{max: max, m: map[windowKey]*window{}}
}

// get returns the shards known full in the window k.
func (f *windows) get(k windowKey) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.m[k]; w != nil {
		return w.full
	}
	return 0
}

// at returns the window k, which ends at end, remembering it if new. The
// caller holds f.mu.
func (f *windows) at(k windowKey, end time.Time) *window {
	w := f.m[k]
	if w == nil {
		if len(f.m) >= f.max {
			f.evict(end.Add(-k.per))
		}
		w = &window{end: end, next: rand.IntN(shards(k.limit, k.per))}
		f.m[k] = w
	}
	return w
}

// mark records shard as full in the window k, which ends at end, and
// returns the shards now known full.
func (f *windows) mark(k windowKey, end time.Time, shard int) uint64 {
	return f.set(k, end, shard, func(w *window) *uint64 { return &w.full })
}

// markLow records that shard had fewer places than a lease asked in the
// window k, and returns the shards now known so.
func (f *windows) markLow(k windowKey, end time.Time, shard int) uint64 {
	return f.set(k, end, shard, func(w *window) *uint64 { return &w.low })
}

// set sets shard's bit in the mask of the window k that mask names.
func (f *windows) set(k windowKey, end time.Time, shard int, mask func(*window) *uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := mask(f.at(k, end))
	*m |= 1 << shard
	return *m
}

// taken is what take found: a place from the lease (leased), with the
// places the instance sees left in the lease's shard; or what a write
// needs.
type taken struct {
	leased    bool
	places    int64 // leased: the shard's places left and the lease's
	share     int64 // leased: the shard's share
	full, low uint64
	next      int   // the shard to try first
	size      int64 // the places the write is to take: 1, or a lease
}

// take admits a request from the lease held on the window k when it has
// places left. Without one it returns what the request's write needs, with
// the places it is to take: more than one only when no other lease's write
// of this instance is under way (then it marks one so until endLease), so
// that the instance never holds more than most−1 places unused.
func (f *windows) take(k windowKey, end, now time.Time, most int64) taken {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.at(k, end)
	if w.left > 0 {
		w.left--
		w.served++
		return taken{leased: true, places: w.free + w.left, share: w.share}
	}
	t := taken{full: w.full, low: w.low, next: w.next, size: 1}
	if !w.taking && most > 1 {
		var since time.Duration
		if w.served > 0 {
			since = now.Sub(w.first)
		}
		t.size = leaseSize(most, w.served, since, end.Sub(now))
		w.taking = t.size > 1
	}
	return t
}

// endLease records that the lease's write started by take is over.
func (f *windows) endLease(k windowKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if w := f.m[k]; w != nil {
		w.taking = false
	}
}

// counted records a write that took size places of shard (whose share is
// share) in the window k, leaving count in it, for a request admitted at
// now: the places beyond the request's own become the lease.
func (f *windows) counted(k windowKey, end, now time.Time, shard int, size, count, share int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w := f.at(k, end)
	if count >= share { // the write took the shard's last place
		w.full |= 1 << shard
	}
	if w.served == 0 {
		w.first = now
	}
	w.served++
	w.next = (shard + 1) % shards(k.limit, k.per)
	if size > 1 {
		w.left += size - 1
		w.free, w.share = share-count, share
	}
}

// leaseSize is how many places a request takes when its instance holds no
// lease: itself, and the requests its instance is expected to serve before
// the window ends, at most most. A lease grows with the requests the
// instance has admitted in the window (served; it at most doubles them)
// and is at most what it would admit in the window's remaining time
// (left) at its rate since its first (since ago; 0 when not known).
func leaseSize(most, served int64, since, left time.Duration) int64 {
	size := min(most, served)
	if since > 0 {
		if use := float64(served) * left.Seconds() / since.Seconds(); use < float64(size-1) {
			size = 1 + int64(use)
		}
	}
	return max(size, 1)
}

// evict forgets the windows that ended by now, and when that frees too
// little, a quarter of the others (any: map order).
func (f *windows) evict(now time.Time) {
	for k, w := range f.m {
		if !w.end.After(now) {
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
type Reached struct{ f *windows }

// NewReached returns an empty Reached.
func NewReached() *Reached { return &Reached{f: newWindows(windowsMax)} }

// Has reports whether counter is known to have reached n in the window
// [window, window+per).
func (r *Reached) Has(counter string, window time.Time, per time.Duration, n int) bool {
	return r.f.get(windowKey{bucket: counter, window: window.UnixNano(), per: per, limit: n}) != 0
}

// Mark records that counter reached n in the window [window, window+per).
func (r *Reached) Mark(counter string, window time.Time, per time.Duration, n int) {
	r.f.mark(windowKey{bucket: counter, window: window.UnixNano(), per: per, limit: n}, window.Add(per), 0)
}
