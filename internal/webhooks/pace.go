package webhooks

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/store"
)

// Pacer counts the attempts to an endpoint against its maxPerSecond
// across every process that makes them: ratelimit.Shared, whose fixed
// one-second windows in the store admit at most the limit in each second.
// A transport whose attempts run in many processes (AWS: deliver and
// attempt) passes one in Config; the local Pipeline paces in its scheduler
// and passes none.
type Pacer interface {
	AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (ratelimit.Decision, error)
}

// PaceBucket names the counter of the pace of a brand's endpoint (a
// subscription's id, or a postback's partner id) for the Pacer.
func PaceBucket(brandID, endpointID string) string { return "pace:" + brandID + "/" + endpointID }

// paceSpread spreads the attempts that wait for the next second over it,
// so that they do not all come back at its start to find it full again.
const paceSpread = time.Second

// takePace takes a place in the current second of the pace of rec's
// endpoint, read as ep. Without one (ok false) it returns when to ask
// again. An endpoint without a pace, or an engine without a Pacer, costs
// nothing: no counter is written.
func (s *Engine) takePace(ctx context.Context, rec endpoints.DeliveryRecord, ep store.Item) (next time.Time, ok bool, err error) {
	if s.pacer == nil {
		return time.Time{}, true, nil
	}
	perSecond := endpoints.PaceOf(ep)
	if perSecond == 0 {
		return time.Time{}, true, nil
	}
	for {
		d, err := s.pacer.AllowPer(ctx, PaceBucket(rec.BrandID, rec.EndpointID()), perSecond, time.Second)
		if err != nil {
			return time.Time{}, false, err
		}
		now := s.db.Now()
		if !d.Allowed {
			return now.Add(d.Wait + rand.N(paceSpread)), false, nil
		}
		// A place is for an attempt that starts in its second: one whose
		// second ended while the counter answered counts in the next.
		if now.Before(d.Reset) {
			return time.Time{}, true, nil
		}
	}
}

// paced is the result of a step that left rec's next attempt to its turn
// at next: nothing is written and no attempt counted, so the transport
// asks again then for the same attempt.
func (s *Engine) paced(rec endpoints.DeliveryRecord, next time.Time) AttemptResult {
	res := s.resultOf(rec)
	res.Paced, res.NextAttemptAt, res.RetryIn = true, ptrTo(tally.NewTime(next)), next.Sub(s.db.Now())
	return res
}
