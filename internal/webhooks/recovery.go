package webhooks

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// AbandonDelivery marks a pending delivery failed without another attempt,
// for a transport that cannot carry its schedule on (on AWS: the retry
// workflow's attempt task kept erroring, or its executions kept ending
// early). The delivery stays in the log with the attempts it had, and a
// manual retry starts it again. A delivery that is no longer pending is
// left as it is; like Attempt, the step may be repeated.
func (s *Engine) AbandonDelivery(ctx context.Context, ref endpoints.DeliveryRef) (AttemptResult, error) {
	rec, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(ref.BrandID, ref.DeliveryID))
	if err != nil {
		return AttemptResult{}, records.NotFound(err, "delivery", ref.DeliveryID)
	}
	if rec.Status != tally.DeliveryPending {
		return s.resultOf(rec), nil
	}
	return s.recordAttempt(ctx, rec, nil, nil)
}

// abandonParked fails a delivery parked behind a probe that failed its
// schedule, its last attempt at last, as its own schedule would have failed
// it. One parked after that attempt (a retry, a message that waited in the
// queue; its id, which sorts by its event's time, may be older than the
// probe's) has seen no attempt of the probe fail, and stays parked for a
// probe of its own.
func (s *Engine) abandonParked(ctx context.Context, ref endpoints.DeliveryRef, last time.Time) (bool, error) {
	rec, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(ref.BrandID, ref.DeliveryID))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil // expired meanwhile
	case err != nil:
		return false, err
	case rec.Status != tally.DeliveryPending || rec.UpdatedAt.After(last):
		return false, nil
	}
	_, err = s.recordAttempt(ctx, rec, nil, nil)
	return err == nil, err
}

// Dropped is what Overdue found.
type Dropped struct {
	Events     []string                // ids of events to fan out again
	Deliveries []endpoints.DeliveryRef // pending deliveries to queue again
	Skipped    []Skipped               // items it could not read (skip)
}

// Overdue lists what a transport that does not watch the indexes itself
// (on AWS: the stream, the queue and the state machine) should have moved on
// before cutoff but has not: events still in the outbox (not fanned out)
// and pending deliveries whose next attempt was due. Both come from gsi3,
// oldest first, at most limit of each: the first page of a Sweep, which
// reads them all. Fanning out and attempting again are idempotent, so the
// caller re-drives them through the usual steps. An item it cannot read is
// skipped, with a backoff (skip).
func (s *Engine) Overdue(ctx context.Context, cutoff time.Time, limit int) (Dropped, error) {
	return s.Sweep(cutoff, limit).Next(ctx, limit)
}

// StreamPosition is where StreamConversions got to: past the conversion
// After in shard Shard of brand Brand (the zero position: the start).
type StreamPosition struct {
	Brand string `json:"brandId,omitempty"`
	Shard int    `json:"shard,omitempty"`
	After string `json:"after,omitempty"`
}

// StreamConversions reads the conversions of every brand that are marked
// for the fan-out (conversions.FanOutAttr) and whose ids (which sort by
// the time they were made) fall between from and to, from the position at
// on (brands in id order, then shards, then ids), and hands them to fn, a
// query's page at a time (one with none of them too), with the position
// past that page: the
// conversions whose stream records a fan-out batch it gave up on may have
// held, its records' arrival times being all that FanoutDLQ keeps of it.
// The caller dispatches them again (DispatchConversion), which repeats
// nothing already done, and may go on later from a position fn was given.
// fn returning false stops the reading.
func (s *Engine) StreamConversions(ctx context.Context, from, to time.Time, at StreamPosition, fn func([]store.Item, StreamPosition) bool) error {
	skFrom, skTo := ids.Floor("cnv_", from), ids.Ceil("cnv_", to)
	brands := ""
	for {
		page, err := s.db.Query(ctx, store.Query{Index: store.GSI1, PK: keys.Brands, SKFrom: at.Brand, Limit: records.MaxScan, Cursor: brands})
		if err != nil {
			return err
		}
		for _, brand := range page.Items {
			pos := StreamPosition{Brand: brand.GSI1.SK}
			if pos.Brand == at.Brand {
				pos = at
			}
			for ; pos.Shard < keys.Shards; pos.Shard, pos.After = pos.Shard+1, "" {
				more, err := s.streamConversionsOf(ctx, pos, skFrom, skTo, fn)
				if err != nil || !more {
					return err
				}
			}
		}
		if brands = page.Cursor; brands == "" {
			return nil
		}
	}
}

// streamConversionsOf is StreamConversions in the shard of pos, past its
// After; false when fn stopped it.
func (s *Engine) streamConversionsOf(ctx context.Context, pos StreamPosition, skFrom, skTo string, fn func([]store.Item, StreamPosition) bool) (bool, error) {
	if pos.After != "" {
		// Past After: ids have one length, so the next one differs from
		// it within that length and sorts after any suffix of it.
		skFrom = max(skFrom, pos.After+"~")
	}
	cursor := ""
	for {
		page, err := s.db.Query(ctx, store.Query{PK: keys.ConversionPK(pos.Brand, pos.Shard), SKFrom: skFrom, SKTo: skTo, Limit: records.MaxScan, Cursor: cursor})
		if err != nil {
			return false, err
		}
		if len(page.Items) > 0 {
			pos.After = page.Items[len(page.Items)-1].SK
		}
		// fn sees every page, none marked too: it may stop between any two
		// queries (its time is up) and go on later from pos.
		marked := slices.DeleteFunc(page.Items, func(it store.Item) bool { return it.Attrs[conversions.FanOutAttr] != conversions.FanOutFromStream })
		if !fn(marked, pos) {
			return false, nil
		}
		if cursor = page.Cursor; cursor == "" {
			return true, nil
		}
	}
}
