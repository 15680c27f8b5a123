package tracking

import (
	"sync"
	"time"
)

// processRates counts requests in fixed windows in memory: for each bucket,
// the count of its current window.
type processRates struct {
	mu     sync.Mutex
	counts map[string]windowCount
}

type windowCount struct {
	window, end time.Time
	n           int64
}

// processRatesMax bounds memory: past it, buckets whose window has ended are
// dropped.
const processRatesMax = 10_000

// add counts one request of bucket in the window [window, end) unless that
// would pass limit. It returns the count after the request (or the count
// that refused it).
func (r *processRates) add(bucket string, window, end time.Time, limit int64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.counts == nil {
		r.counts = map[string]windowCount{}
	}
	c := r.counts[bucket]
	// A request that read the clock just before the window moved on counts
	// in the newer window, which is the stricter choice.
	if window.After(c.window) {
		if len(r.counts) >= processRatesMax {
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
