package webhooks

import (
	"context"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Observer is told, for metrics, of each attempt step the engine records:
// the delivery's type (tally.DeliveryWebhook or tally.DeliveryPostback),
// what became of it (an Outcome), and, when a request was sent, how long
// the attempt took (sent false: the step failed the delivery without
// sending, its endpoint gone or disabled).
type Observer interface {
	AttemptRecorded(deliveryType, outcome string, latency time.Duration, sent bool)
}

// What an attempt step made of its delivery.
const (
	OutcomeSucceeded = "succeeded" // the receiver took it
	OutcomeRetrying  = "retrying"  // another attempt is scheduled
	OutcomeFailed    = "failed"    // given up
)

// recorded tells the observer of an attempt step recorded: rec as written,
// with at (nil: none was sent).
func (s *Engine) recorded(rec endpoints.DeliveryRecord, at *tally.Attempt) {
	if s.observer == nil {
		return
	}
	outcome := OutcomeRetrying
	switch rec.Status {
	case tally.DeliverySucceeded:
		outcome = OutcomeSucceeded
	case tally.DeliveryFailed:
		outcome = OutcomeFailed
	}
	var latency time.Duration
	if at != nil {
		latency = time.Duration(at.LatencyMs) * time.Millisecond
	}
	s.observer.AttemptRecorded(rec.Type, outcome, latency, at != nil)
}

// Backlog is how far behind the attempts are.
type Backlog struct {
	// Due counts the deliveries whose next attempt is due now, up to
	// MaxBacklog.
	Due int
	// Lag is how long ago the oldest of them fell due (0 when none).
	Lag time.Duration
}

// MaxBacklog bounds the entries Backlog counts, so that reading it costs
// at most a few pages of the due index however long the queue grows.
const MaxBacklog = 10_000

// Backlog reads the due index: the deliveries whose next attempt is due
// and not claimed by a process making it.
func (s *Engine) Backlog(ctx context.Context) (Backlog, error) {
	now := s.db.Now()
	var b Backlog
	for shard := range keys.QueueShards {
		q := store.Query{Index: store.GSI3, PK: keys.DueQueuePK(shard), SKTo: keys.DueQueueSK(now, "~")}
		for {
			// The first page of every shard is read, for its oldest entry.
			q.Limit = max(min(MaxBacklog-b.Due, records.MaxScan), 1)
			page, err := s.db.Query(ctx, q)
			if err != nil {
				return Backlog{}, err
			}
			if len(page.Items) > 0 && q.Cursor == "" {
				if at, ok := dueTime(page.Items[0].GSI3.SK); ok {
					b.Lag = max(b.Lag, now.Sub(at))
				}
			}
			b.Due = min(b.Due+len(page.Items), MaxBacklog)
			if q.Cursor = page.Cursor; q.Cursor == "" || b.Due == MaxBacklog {
				break
			}
		}
	}
	return b, nil
}
