// Package ratelimit counts requests in fixed windows against a limit: per
// API key, per client address, per sign-in. Shared counts in the store,
// exact across every instance that shares it; Local counts in this
// process, for a process that is the only one serving from its store.
package ratelimit

import (
	"context"
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

// Shared counts in conditional counters of the store: exact across every
// instance sharing it. A refused request is not counted.
type Shared struct{ db *records.DB }

// NewShared returns the limits counted in db.
func NewShared(db *records.DB) *Shared { return &Shared{db: db} }

// Allow counts one request of bucket (an API key, a client IP) against
// limit requests per minute.
func (s *Shared) Allow(ctx context.Context, bucket string, limit int) (Decision, error) {
	return s.AllowPer(ctx, bucket, limit, Window)
}

// AllowPer is Allow with fixed windows of the given length (aligned to the
// Unix epoch), for limits such as sign-in attempts per quarter hour.
func (s *Shared) AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (Decision, error) {
	d, window := decision(s.db.Clock(), limit, per)
	it, err := s.db.Update(ctx, store.Op{
		Kind:      store.OpUpdate,
		Key:       keys.Rate(bucket, window.Unix()),
		Add:       map[string]int64{"n": 1},
		ExpiresAt: d.Reset.Add(time.Hour).Unix(),
		Conds:     []store.Cond{store.NumLess("n", int64(limit))},
	})
	if _, failed := store.FailedOp(err); failed {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	d.Allowed = true
	d.Remaining = max(limit-int(it.Nums["n"]), 0)
	return d, nil
}
