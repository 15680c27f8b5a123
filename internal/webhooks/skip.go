package webhooks

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// An item the reconciler cannot decode, or whose work it cannot re-drive,
// is skipped: the rest of the run goes on without it. So that a poison item
// is neither retried every run forever nor forgotten, the skip is recorded
// on the item: redriveFails counts the skips, and redriveAt (unix ms) is
// when the item may be read again, skipBackoff after the first skip,
// doubling with each further one, at most maxSkipBackoff. The reads of the
// reconciler (Overdue, Released) pass over an item until its redriveAt.
// Rewriting the item (its delivery attempted, its event fanned out) drops
// both attributes: the record that replaced it is tried as new.
const (
	skipBackoff    = 5 * time.Minute
	maxSkipBackoff = 24 * time.Hour
)

// Skipped is an item a reconciler run skipped, and why.
type Skipped struct {
	Key store.Key
	Err error
}

// backingOff says whether a skipped item waits out its backoff at now.
func backingOff(it store.Item, now time.Time) bool {
	at, err := strconv.ParseInt(it.Attrs["redriveAt"], 10, 64)
	return err == nil && now.Before(time.UnixMilli(at))
}

// skip records a skip on the item it, as read (see above).
func skip(ctx context.Context, db *records.DB, it store.Item, cause error) Skipped {
	fails := it.Nums["redriveFails"] + 1
	wait := min(skipBackoff<<min(fails-1, 16), maxSkipBackoff)
	op := store.Op{Kind: store.OpUpdate, Key: it.Key, Conds: []store.Cond{store.Exists()},
		Set: map[string]string{"redriveAt": strconv.FormatInt(db.Now().Add(wait).UnixMilli(), 10)},
		Add: map[string]int64{"redriveFails": 1}}
	if err := db.Transact(ctx, op); err != nil {
		if _, gone := store.FailedOp(err); !gone {
			cause = errors.Join(cause, err) // tried again next run
		}
	}
	return Skipped{Key: it.Key, Err: cause}
}

// SkipEvent records that the reconciler could not re-drive the event id
// (skip): its outbox entry is passed over until its backoff ends.
func (s *Engine) SkipEvent(ctx context.Context, eventID string, cause error) Skipped {
	it, err := s.db.Get(ctx, keys.Event(eventID))
	if err != nil {
		return Skipped{Key: keys.Event(eventID), Err: errors.Join(cause, err)}
	}
	return skip(ctx, s.db, it, cause)
}
