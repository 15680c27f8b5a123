package webhooks

import (
	"context"
	"time"

	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// shardedQueue reads a queue spread over keys.QueueShards partitions (the
// table's or an index's) up to skTo (inclusive), oldest first across the
// shards, a page at a time: each call goes on where the last one stopped,
// so a caller can take a queue of any length in steps of bounded memory.
// Each shard is read a page of perShard items at a time, when the merge
// needs its next item.
type shardedQueue struct {
	db       *records.DB
	index    store.Index
	pk       func(shard int) string
	skTo     string
	perShard int
	shards   [keys.QueueShards]struct {
		buf    []store.Item
		cursor string
		done   bool
	}
}

func newShardedQueue(db *records.DB, index store.Index, pk func(int) string, skTo string, perShard int) *shardedQueue {
	return &shardedQueue{db: db, index: index, pk: pk, skTo: skTo, perShard: min(max(perShard, 1), records.MaxScan)}
}

// next returns the queue's next n entries at most, oldest first; fewer
// only when the queue has no more.
func (q *shardedQueue) next(ctx context.Context, n int) ([]store.Item, error) {
	var out []store.Item
	for len(out) < n {
		best := -1
		for i := range q.shards {
			sh := &q.shards[i]
			if len(sh.buf) == 0 && !sh.done {
				page, err := q.db.Query(ctx, store.Query{Index: q.index, PK: q.pk(i), SKTo: q.skTo, Limit: q.perShard, Cursor: sh.cursor})
				if err != nil {
					return out, err
				}
				sh.buf, sh.cursor, sh.done = page.Items, page.Cursor, page.Cursor == ""
			}
			if len(sh.buf) > 0 && (best < 0 || sh.buf[0].IndexKey(q.index).SK < q.shards[best].buf[0].IndexKey(q.index).SK) {
				best = i
			}
		}
		if best < 0 {
			break
		}
		out = append(out, q.shards[best].buf[0])
		q.shards[best].buf = q.shards[best].buf[1:]
	}
	return out, nil
}

// drained says whether the queue has nothing left to return.
func (q *shardedQueue) drained() bool {
	for i := range q.shards {
		if len(q.shards[i].buf) > 0 || !q.shards[i].done {
			return false
		}
	}
	return true
}

// Sweep reads what Overdue finds, a page at a time: each Next goes on
// where the last one stopped, until Done. Entries re-driven meanwhile (a
// delivery queued again stays due until it is attempted) are not read
// twice by one Sweep.
type Sweep struct {
	s      *Engine
	events *shardedQueue // events in the outbox
	due    *shardedQueue // pending deliveries, by next attempt
}

// Sweep starts reading what should have moved on before cutoff (Overdue),
// in pages of about page of each kind.
func (s *Engine) Sweep(cutoff time.Time, page int) *Sweep {
	// The oldest items are spread over the shards by hash: a shard's page
	// holds about its share of the next page, with room to spare.
	perShard := max(2*page/keys.QueueShards, 25)
	return &Sweep{s: s,
		events: newShardedQueue(s.db, store.GSI3, keys.OutboxPK, ids.Ceil("evt_", cutoff), perShard),
		due:    newShardedQueue(s.db, store.GSI3, keys.DueQueuePK, keys.DueQueueSK(cutoff, "~"), perShard),
	}
}

// Done says whether the sweep has read everything.
func (w *Sweep) Done() bool {
	return w.events.drained() && w.due.drained()
}

// Next returns the next page: at most n events and n deliveries, each
// oldest first. An item that waits out a skip's backoff is passed over; one
// it cannot read is skipped (skip).
func (w *Sweep) Next(ctx context.Context, n int) (Dropped, error) {
	var d Dropped
	items, err := w.events.next(ctx, n)
	for _, it := range w.usable(items) {
		d.Events = append(d.Events, it.GSI3.SK)
	}
	if err != nil {
		return d, err
	}
	items, err = w.due.next(ctx, n)
	for _, it := range w.usable(items) {
		var rec endpoints.DeliveryRecord
		if err := records.Decode(it, &rec); err != nil {
			d.Skipped = append(d.Skipped, skip(ctx, w.s.db, it, err))
			continue
		}
		d.Deliveries = append(d.Deliveries, endpoints.DeliveryRef{BrandID: rec.BrandID, DeliveryID: rec.ID})
	}
	return d, err
}

// usable drops the items that wait out a skip's backoff.
func (w *Sweep) usable(items []store.Item) []store.Item {
	now := w.s.db.Now()
	out := items[:0]
	for _, it := range items {
		if !backingOff(it, now) {
			out = append(out, it)
		}
	}
	return out
}
