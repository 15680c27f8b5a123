package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/trace"
)

// RetrySchedule holds the waits before retries 1 to 6 (spec section 6);
// attempt 1 is immediate, and a delivery whose sixth retry fails is failed.
// The Step Functions definition is generated from it.
var RetrySchedule = [...]time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour}

// MaxAttempts is attempt 1 plus the retries.
const MaxAttempts = len(RetrySchedule) + 1

// Sender makes one HTTP attempt of a delivery.
type Sender interface {
	Send(ctx context.Context, r outgoing.Request) tally.Attempt
}

// DeliveryMessage is what a transport that queues deliveries (AWS) sends
// for one: its ref and, when Dispatch did not write it, the delivery as
// planned.
type DeliveryMessage struct {
	endpoints.DeliveryRef
	// Planned is the delivery, pending and not yet written, of an event
	// with at most maxCarried: attempt 1 writes it once, with its outcome
	// (FirstAttempt). The event stays in the outbox until all of its
	// deliveries are written, so a message lost on the way is re-driven
	// with the event. An event made from the stream is in no outbox: a
	// message lost after the fan-out queued it is kept by DeliveryDLQ.
	Planned json.RawMessage `json:"planned,omitempty"`
	// Siblings are the ids of the event's other deliveries, carried the
	// same way (for an event in the outbox): the step that finds them all
	// written after writing its own takes the event out of the outbox.
	Siblings []string `json:"siblings,omitempty"`
	// Envelope carries, with a planned delivery of an event made from the
	// stream, the event's envelope, so that attempt 1 need not read the
	// event (which does not change).
	Envelope json.RawMessage `json:"envelope,omitempty"`
	// Waited counts the times the delivery's endpoint's pace sent the
	// message back to the queue (AttemptResult.Paced): each wait is spread
	// a little wider.
	Waited int `json:"waited,omitempty"`
}

// maxCarried is the most deliveries of an event that Dispatch carries in
// their messages rather than writes: each step reads the others after
// writing its own (strongly consistent reads cost a fifth of a write, and
// a delivery written pending and again with its outcome costs about six
// writes more than one written once).
const maxCarried = 4

// planned is the delivery the message carries, unsaved.
func (m DeliveryMessage) planned() (endpoints.DeliveryRecord, error) {
	var rec endpoints.DeliveryRecord
	if err := json.Unmarshal(m.Planned, &rec); err != nil {
		return rec, fmt.Errorf("delivery message %s: %w", m.DeliveryID, err)
	}
	if rec.ID != m.DeliveryID || rec.BrandID != m.BrandID || rec.Status != tally.DeliveryPending || len(rec.Attempts) != 0 {
		return rec, fmt.Errorf("delivery message %s carries another delivery", m.DeliveryID)
	}
	rec.Unsaved = true
	return rec, nil
}

// deliveryID is the same for the same (event, endpoint), so a repeated
// fan-out finds the delivery it made before. It sorts by the event's time.
// Where the DB places identifiers in shard 0, it is the first of a
// deterministic series that lies there (a fan-out's deliveries and their
// index entries then land in one shard's pages, not four).
func (s *Engine) deliveryID(evt tally.Event, endpointID string) string {
	return s.db.DerivedID("wh_", evt.CreatedAt.Time, evt.ID+"/"+endpointID)
}

// FanOut makes the deliveries of an event: one per enabled subscription of
// its brand whose events name it (a webhook.test goes to its one
// subscription), and one to the partner's postback for a conversion event
// it fires on (a postback.test goes to its one postback). It is
// idempotent: delivery ids are deterministic and written only if absent, so
// a repeated event creates nothing. It returns every delivery of the event
// that is still pending, new or not, for the transport to attempt, and takes
// the event out of the outbox.
func (s *Engine) FanOut(ctx context.Context, eventID string) ([]endpoints.DeliveryRef, error) {
	recs, err := s.fanOutMany(ctx, []string{eventID})
	refs := make([]endpoints.DeliveryRef, len(recs))
	for i, rec := range recs {
		refs[i] = rec.Ref()
	}
	return refs, err
}

// Dispatch is FanOut for a transport that carries deliveries in its
// messages (AWS): the new deliveries of an event with at most maxCarried
// are planned, not written (a delivery written pending and again with
// attempt 1's outcome costs its write and every index entry twice);
// attempt 1 writes each once, and the last written takes the event out of
// the outbox (FirstAttempt). The deliveries of an event with more, or of
// one fanned out before, are written as FanOut writes them, and their
// messages carry only refs.
//
// The fan-outs of a batch share reads (nil: the event's own).
func (s *Engine) Dispatch(ctx context.Context, eventID string, reads *Reads) ([]DeliveryMessage, error) {
	item, err := s.db.Get(ctx, keys.Event(eventID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // expired long ago: nothing left to deliver
	}
	if err != nil {
		return nil, err
	}
	return s.dispatch(ctx, item, reads)
}

// dispatch is Dispatch of the event item read as item.
func (s *Engine) dispatch(ctx context.Context, item store.Item, reads *Reads) ([]DeliveryMessage, error) {
	if reads == nil {
		reads = NewReads()
	}
	plan, err := s.planFanOutOf(ctx, item, reads)
	if err != nil || plan == nil {
		return nil, err
	}
	made := fromStream(item)
	if n := len(plan.recs); n > 0 && n <= maxCarried && (plan.outboxed || made) {
		msgs := make([]DeliveryMessage, n)
		for i, rec := range plan.recs {
			msgs[i] = DeliveryMessage{DeliveryRef: rec.Ref(), Planned: records.MustJSON(rec)}
			if made {
				msgs[i].Envelope = item.Data
				continue
			}
			for j, other := range plan.recs {
				if j != i {
					msgs[i].Siblings = append(msgs[i].Siblings, other.ID)
				}
			}
		}
		return msgs, nil
	}
	recs, err := s.writeFanOuts(ctx, []*fanOutPlan{plan})
	msgs := make([]DeliveryMessage, len(recs))
	for i, rec := range recs {
		msgs[i] = DeliveryMessage{DeliveryRef: rec.Ref()}
	}
	return msgs, err
}

// fanOutPlan is what fanning out one event writes: its deliveries, and
// the event taken out of the outbox.
type fanOutPlan struct {
	event    store.Item
	outboxed bool
	recs     []endpoints.DeliveryRecord // pending, as planned
	eps      []store.Item               // each delivery's endpoint, as read
	// subs are the webhooks' subscriptions, decoded (nil for a postback).
	subs []*endpoints.SubscriptionRecord
	// first holds, where not nil, attempt 1 of a delivery, made before the
	// fan-out is written (the local pipeline's fast path).
	first []*firstAttempt
}

// pace is the maxPerSecond of the endpoint of delivery i (0: none).
func (p *fanOutPlan) pace(i int) int {
	if sub := p.subs[i]; sub != nil {
		if sub.MaxPerSecond == nil {
			return 0
		}
		return *sub.MaxPerSecond
	}
	return endpoints.PaceOf(p.eps[i])
}

// firstAttempt is attempt 1 of a delivery made before its fan-out is
// written. If its answer came in time (answered, set before the write), it
// is recorded with the fan-out, the delivery written once; otherwise the
// delivery is written pending and the attempt is recorded when it answers,
// as any attempt. Until the write commits the event stays in the outbox,
// so a crash in between makes attempt 1 again, under the same webhook id.
type firstAttempt struct {
	at       tally.Attempt
	sent     chan struct{} // closed once at holds the answer
	answered bool
	// What the write did: recorded the attempt (result says with what
	// outcome), or wrote the delivery as stored, without it. Neither when
	// the write failed: the event is still in the outbox.
	recorded, written bool
	result            AttemptResult
	stored            endpoints.DeliveryRecord
}

// planFanOuts reads what fanning out events needs, skipping those with
// nothing to do. On an error it returns the plans made before it.
func (s *Engine) planFanOuts(ctx context.Context, eventIDs []string) ([]*fanOutPlan, error) {
	reads := NewReads()
	var plans []*fanOutPlan
	for _, id := range eventIDs {
		plan, err := s.planFanOut(ctx, id, reads)
		if err != nil {
			return plans, err
		}
		if plan != nil {
			plans = append(plans, plan)
		}
	}
	return plans, nil
}

// planFanOut reads what fanning out an event needs; nil means there is
// nothing to do.
func (s *Engine) planFanOut(ctx context.Context, eventID string, reads *Reads) (*fanOutPlan, error) {
	item, err := s.db.Get(ctx, keys.Event(eventID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil // expired long ago: nothing left to deliver
	}
	if err != nil {
		return nil, err
	}
	return s.planFanOutOf(ctx, item, reads)
}

// subscribedAfter says whether sub was created after evt happened, beyond
// the clocks' disagreement between the functions that wrote them: an event
// fanned out again later (a stream batch given up, hours after) goes to the
// subscriptions there were, as its first fan-out would have.
func subscribedAfter(sub endpoints.SubscriptionRecord, evt tally.Event) bool {
	return sub.CreatedAt.After(evt.CreatedAt.Add(time.Minute))
}

// planFanOutOf is planFanOut of the event item read as item.
func (s *Engine) planFanOutOf(ctx context.Context, item store.Item, reads *Reads) (*fanOutPlan, error) {
	var evt tally.Event
	if err := records.Decode(item, &evt); err != nil {
		return nil, err
	}
	brandSubs, err := reads.subscriptions(ctx, s.db, evt.BrandID)
	if err != nil {
		return nil, err
	}
	now := s.db.Now()
	plan := &fanOutPlan{event: item, outboxed: inOutbox(item)}
	for _, sub := range brandSubs {
		if target := item.Attrs["subscriptionId"]; target != "" && target != sub.Rec.ID ||
			target == "" && (!slices.Contains(sub.Rec.Events, evt.Event) || sub.Rec.Status == tally.EndpointDisabled || subscribedAfter(sub.Rec, evt)) {
			continue
		}
		plan.recs = append(plan.recs, endpoints.DeliveryRecord{
			Delivery: tally.Delivery{
				ID: s.deliveryID(evt, sub.Rec.ID), BrandID: evt.BrandID, Type: tally.DeliveryWebhook, EventID: evt.ID, Event: evt.Event,
				SubscriptionID: sub.Rec.ID, URL: sub.Rec.URL, Status: tally.DeliveryPending, Attempts: []tally.Attempt{},
				NextAttemptAt: ptrTo(tally.NewTime(now)), CreatedAt: tally.NewTime(now), UpdatedAt: tally.NewTime(now),
			},
		})
		plan.eps, plan.subs = append(plan.eps, sub.Item), append(plan.subs, &sub.Rec)
	}
	pb, pbItem, err := s.postbackDelivery(ctx, item, evt, reads)
	if err != nil {
		return nil, err
	}
	if pb != nil {
		plan.recs, plan.eps, plan.subs = append(plan.recs, *pb), append(plan.eps, pbItem), append(plan.subs, nil)
	}
	for i := range plan.recs {
		plan.recs[i].Trace, plan.recs[i].Conversion = item.Attrs[trace.Attr], item.Attrs[conversionAttr]
	}
	if len(plan.recs) == 0 && !plan.outboxed {
		return nil, nil
	}
	plan.first = make([]*firstAttempt, len(plan.recs))
	return plan, nil
}

// ops is what the plan writes: each delivery only if absent, with its
// first attempt where answered in time (recorded at now), and the event
// out of the outbox.
func (p *fanOutPlan) ops(ctx context.Context, s *Engine, now time.Time) []store.Op {
	var ops []store.Op
	for i, rec := range p.recs {
		if f := p.first[i]; f != nil && f.answered {
			rec = s.withAttempt(rec, &f.at, now)
		}
		ops = append(ops, store.Put(s.answers.Item(ctx, rec), store.NotExists()))
	}
	if p.outboxed {
		out := p.event
		out.GSI3 = store.IndexKey{}
		ops = append(ops, store.Put(out, store.Exists()))
	}
	return ops
}

// fanOutMany fans out events together (writeFanOuts).
func (s *Engine) fanOutMany(ctx context.Context, eventIDs []string) ([]endpoints.DeliveryRecord, error) {
	plans, err := s.planFanOuts(ctx, eventIDs)
	out, werr := s.writeFanOuts(ctx, plans)
	return out, errors.Join(err, werr)
}

// writeFanOuts writes fan-outs: the first fan-out of each event writes all
// its deliveries and takes it out of the outbox, and as many events as fit
// go in one transaction (one commit), with the first attempts answered in
// time and, one update per endpoint, what they did to its health. Events
// fanned out before are found when a write meets a delivery that exists;
// they go one by one, keeping what exists, and their first attempts are
// recorded afterwards. It returns the pending deliveries with no first
// attempt, for the transport to attempt.
func (s *Engine) writeFanOuts(ctx context.Context, plans []*fanOutPlan) ([]endpoints.DeliveryRecord, error) {
	return s.writes.write(ctx, s, plans)
}

// FanOutWrites is how fan-outs are written: Batched or Apart.
type FanOutWrites interface {
	write(ctx context.Context, s *Engine, plans []*fanOutPlan) ([]endpoints.DeliveryRecord, error)
	// batched says whether deliveries are written together with the first
	// attempts answered before the write (which a pipeline then makes
	// before it).
	batched() bool
}

// Apart writes each delivery of a fan-out by itself: where an item written
// in a transaction costs more than the same item written apart (DynamoDB
// bills each item of a transaction twice). No atomicity is needed: a
// fan-out cut short is completed by a repeated one (the event stays in the
// outbox until the end).
type Apart struct{}

func (Apart) batched() bool { return false }

func (Apart) write(ctx context.Context, s *Engine, plans []*fanOutPlan) ([]endpoints.DeliveryRecord, error) {
	var out []endpoints.DeliveryRecord
	for _, plan := range plans {
		recs, err := s.fanOutEach(ctx, plan.recs, plan.event, plan.outboxed)
		if err != nil {
			return out, err
		}
		out = append(out, pending(recs)...)
	}
	return out, nil
}

// Batched writes the fan-outs of many events in one transaction: where a
// transaction is one commit, so fewer are cheaper (the embedded store).
type Batched struct{}

func (Batched) batched() bool { return true }

func (Batched) write(ctx context.Context, s *Engine, plans []*fanOutPlan) ([]endpoints.DeliveryRecord, error) {
	var out []endpoints.DeliveryRecord
	eps := map[store.Key]store.Item{} // the endpoints as last read or written
	var batch []*fanOutPlan
	used := 0 // operations in the batch, one per endpoint to update included
	seen := map[store.Key]bool{}
	for _, plan := range plans {
		need := len(plan.recs)
		if plan.outboxed {
			need++
		}
		fresh := plan.answeredEndpoints(seen)
		if len(batch) > 0 && used+need+len(fresh) > store.MaxTransactOps {
			recs, err := s.writeBatch(ctx, batch, eps)
			out = append(out, recs...)
			if err != nil {
				return out, err
			}
			batch, used = batch[:0], 0
			clear(seen)
			fresh = plan.answeredEndpoints(seen)
		}
		if need+len(fresh) > store.MaxTransactOps {
			// Too many endpoints to update with the deliveries (a brand
			// with nearly its 50 subscriptions): the attempts are
			// recorded afterwards.
			for _, f := range plan.first {
				if f != nil {
					f.answered = false
				}
			}
			fresh = nil
		}
		for _, ep := range fresh {
			seen[ep.Key] = true
			if _, ok := eps[ep.Key]; !ok {
				eps[ep.Key] = ep
			}
		}
		batch = append(batch, plan)
		used += need + len(fresh)
	}
	if len(batch) == 0 {
		return out, nil
	}
	recs, err := s.writeBatch(ctx, batch, eps)
	return append(out, recs...), err
}

// answeredEndpoints are the endpoints, as read, of the plan's first
// attempts answered in time, but for those in seen.
func (p *fanOutPlan) answeredEndpoints(seen map[store.Key]bool) []store.Item {
	var out []store.Item
	for i, f := range p.first {
		k := p.eps[i].Key
		if f != nil && f.answered && !seen[k] && !slices.ContainsFunc(out, func(it store.Item) bool { return it.Key == k }) {
			out = append(out, p.eps[i])
		}
	}
	return out
}

// writeBatch writes fan-outs in one transaction (writeFanOuts). eps holds
// the endpoints of the first attempts it records, as last read; it is kept
// up to date (an endpoint deleted meanwhile: the zero item).
func (s *Engine) writeBatch(ctx context.Context, batch []*fanOutPlan, eps map[store.Key]store.Item) ([]endpoints.DeliveryRecord, error) {
	for {
		now := s.db.Now()
		var ops []store.Op
		for _, plan := range batch {
			ops = append(ops, plan.ops(ctx, s, now)...)
		}
		n := len(ops)
		health := s.healthWrites(batch, eps, now)
		for _, h := range health {
			ops = append(ops, h.op)
		}
		err := s.db.Transact(ctx, ops...)
		i, failed := store.FailedOp(err)
		switch {
		case failed && i >= n:
			// An endpoint changed since it was read: read it again.
			k := health[i-n].key
			fresh, err := s.db.Get(ctx, k)
			if errors.Is(err, store.ErrNotFound) {
				fresh, err = store.Item{}, nil // deleted: nothing left to keep the health of
			}
			if err != nil {
				return nil, err
			}
			eps[k] = fresh
			continue
		case failed:
			return s.writeEach(ctx, batch)
		case err != nil:
			return nil, err
		}
		for _, h := range health {
			eps[h.key] = endpoints.Applied(eps[h.key], h.op)
		}
		var out []endpoints.DeliveryRecord
		for _, plan := range batch {
			for i, rec := range plan.recs {
				switch f := plan.first[i]; {
				case f == nil:
					out = append(out, rec)
				case f.answered:
					rec = s.withAttempt(rec, &f.at, now)
					f.recorded, f.result = true, s.resultOf(rec)
					s.recorded(rec, &f.at)
				default:
					f.written, f.stored = true, rec
				}
			}
		}
		return out, nil
	}
}

// healthWrite is the update of one endpoint's health.
type healthWrite struct {
	key store.Key
	op  store.Op
}

// healthWrites are the updates that record the outcomes of a batch's first
// attempts answered in time in their endpoints' health, one per endpoint,
// from the endpoints in eps.
func (s *Engine) healthWrites(batch []*fanOutPlan, eps map[store.Key]store.Item, now time.Time) []healthWrite {
	var keys []store.Key
	outs := map[store.Key][]endpoints.Outcome{}
	for _, plan := range batch {
		for i, f := range plan.first {
			if f == nil || !f.answered {
				continue
			}
			k := plan.eps[i].Key
			if _, ok := outs[k]; !ok {
				keys = append(keys, k)
			}
			outs[k] = append(outs[k], outcomeOf(&f.at, s.withAttempt(plan.recs[i], &f.at, now)))
		}
	}
	var out []healthWrite
	for _, k := range keys {
		if ep := eps[k]; ep.Key == k {
			if op, ok := s.health.OutcomesOp(ep, outs[k], now); ok {
				out = append(out, healthWrite{key: k, op: op})
			}
		}
	}
	return out
}

// writeEach writes fan-outs one by one, for a batch in which one met a
// delivery that exists (an event fanned out before) or an event gone: each
// writes what is missing and keeps what exists, and the first attempts are
// recorded afterwards, on the deliveries as stored.
func (s *Engine) writeEach(ctx context.Context, batch []*fanOutPlan) ([]endpoints.DeliveryRecord, error) {
	var out []endpoints.DeliveryRecord
	for _, plan := range batch {
		for _, f := range plan.first {
			if f != nil {
				f.answered = false
			}
		}
		recs := plan.recs
		err := s.db.Transact(ctx, plan.ops(ctx, s, s.db.Now())...)
		if _, failed := store.FailedOp(err); failed {
			recs, err = s.fanOutEach(ctx, plan.recs, plan.event, plan.outboxed)
		}
		if err != nil {
			return out, err
		}
		for i, rec := range recs {
			// A first attempt is recorded only on a delivery that has none
			// yet: one made before has its own history (the answer is a
			// repeat under the same webhook id).
			if f := plan.first[i]; f != nil && rec.Status == tally.DeliveryPending && len(rec.Attempts) == rec.CycleStart {
				f.written, f.stored = true, rec
			} else if rec.Status == tally.DeliveryPending {
				out = append(out, rec)
			}
		}
	}
	return out, nil
}

// fanOutEach is FanOut one item at a time, for an event fanned out before
// or a store that writes apart: it writes only the deliveries that are
// missing, and takes the event out of the outbox last. It returns the
// deliveries as stored.
func (s *Engine) fanOutEach(ctx context.Context, planned []endpoints.DeliveryRecord, event store.Item, outboxed bool) ([]endpoints.DeliveryRecord, error) {
	recs := slices.Clone(planned)
	for i, rec := range recs {
		err := s.db.Transact(ctx, store.Put(endpoints.DeliveryItem(rec, s.deliveryRetention), store.NotExists()))
		if _, exists := store.FailedOp(err); exists {
			recs[i], err = records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(rec.BrandID, rec.ID))
		}
		if err != nil {
			return nil, err
		}
	}
	if outboxed {
		if err := leaveOutbox(ctx, s.db, event); err != nil {
			return nil, err
		}
	}
	return recs, nil
}

// written says whether the brand's deliveries with these ids are all
// written.
func written(ctx context.Context, db *records.DB, brandID string, ids []string) (bool, error) {
	for _, id := range ids {
		_, err := db.Get(ctx, keys.Delivery(brandID, id))
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, nil
}

// leaveOutbox writes the event, read as event, without its outbox key: its
// deliveries are written.
func leaveOutbox(ctx context.Context, db *records.DB, event store.Item) error {
	event.GSI3 = store.IndexKey{}
	err := db.Transact(ctx, store.Put(event, store.Exists()))
	if _, gone := store.FailedOp(err); gone {
		return nil // expired meanwhile
	}
	return err
}

func pending(recs []endpoints.DeliveryRecord) []endpoints.DeliveryRecord {
	return slices.DeleteFunc(recs, func(rec endpoints.DeliveryRecord) bool { return rec.Status != tally.DeliveryPending })
}

// AttemptResult says what an attempt step did and what comes next.
type AttemptResult struct {
	Status   string `json:"status"`   // the delivery's status afterwards
	Attempts int    `json:"attempts"` // attempts made in the current schedule
	// Cycle tells the delivery's schedules apart: 0 for the first, then the
	// number of attempts before a manual retry started the current one.
	Cycle   int           `json:"cycle"`
	Sent    bool          `json:"sent"`    // whether this step sent a request
	RetryIn time.Duration `json:"retryIn"` // while pending: the wait before the next attempt
	// NextAttemptAt is when the next attempt is due, while pending (null
	// otherwise): the retry workflow's Wait states read it, so a
	// receiver's Retry-After holds on AWS too.
	NextAttemptAt *tally.Time `json:"nextAttemptAt"`
	Parked        bool        `json:"parked,omitempty"` // waits for its endpoint's circuit: no schedule of its own
	// Paced says the step made no attempt: the endpoint's pace (Config.Pace)
	// is used up for this second. Nothing was written; the same attempt is
	// asked for again at NextAttemptAt. Always present, for the retry
	// workflow's Choice states.
	Paced bool `json:"paced"`
	// Pace is the endpoint's maxPerSecond as the attempt read it (0: none),
	// for the local pipeline's scheduler.
	Pace int `json:"-"`
}

// Attempt makes attempt number n (1 to MaxAttempts, counted in the current
// schedule) of a delivery and records it: succeeded on a 2xx, failed when
// the last attempt fails, otherwise pending with the next attempt scheduled.
// A step whose attempt was already made, or whose delivery is decided, sends
// nothing and reports the state, so a transport may repeat steps freely.
func (s *Engine) Attempt(ctx context.Context, ref endpoints.DeliveryRef, n int, sender Sender) (AttemptResult, error) {
	return s.attempt(ctx, ref, n, sender, 0)
}

// attempt is Attempt; with a lease it first claims the attempt (claim), and
// sends nothing if another process holds it.
func (s *Engine) attempt(ctx context.Context, ref endpoints.DeliveryRef, n int, sender Sender, lease time.Duration) (AttemptResult, error) {
	rec, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(ref.BrandID, ref.DeliveryID))
	if err != nil {
		return AttemptResult{}, records.NotFound(err, "delivery", ref.DeliveryID)
	}
	made := len(rec.Attempts) - rec.CycleStart
	if rec.Status != tally.DeliveryPending || made >= n {
		return s.resultOf(rec), nil
	}
	if made != n-1 {
		return AttemptResult{}, fmt.Errorf("attempt %d of %s asked for before attempt %d was made", n, rec.ID, made+1)
	}
	ep, err := s.db.Get(ctx, rec.EndpointKey())
	if errors.Is(err, store.ErrNotFound) {
		// A deleted subscription or postback gets nothing further.
		return s.recordAttempt(ctx, rec, nil, nil)
	}
	if err != nil {
		return AttemptResult{}, err
	}
	return s.send(ctx, rec, ep, nil, sender, lease)
}

// send makes the next attempt of rec to its endpoint, read as ep, and
// records it; with a lease it claims the attempt first (claim). A webhook's
// envelope is its event's (endpoints.Envelope) unless given.
func (s *Engine) send(ctx context.Context, rec endpoints.DeliveryRecord, ep store.Item, envelope []byte, sender Sender, lease time.Duration) (AttemptResult, error) {
	// The pace first: an attempt that must wait for its turn reads and
	// signs nothing.
	if next, ok, err := s.takePace(ctx, rec, ep); err != nil {
		return AttemptResult{}, err
	} else if !ok {
		return s.paced(rec, next), nil
	}
	if rec.Type == tally.DeliveryWebhook && envelope == nil {
		var err error
		if envelope, err = endpoints.Envelope(ctx, s.db, rec); err != nil {
			return AttemptResult{}, err
		}
		if envelope == nil {
			// Expired (events are kept as long as deliveries, counted from
			// the event; a delivery retried later than that), or its
			// conversion deleted: nothing to send.
			return s.recordAttempt(ctx, rec, nil, nil)
		}
	}
	req, err := s.request(ctx, rec, ep, envelope)
	if err != nil {
		return AttemptResult{}, err
	}
	if lease > 0 {
		if err := s.claim(ctx, rec, lease); err != nil {
			if _, taken := store.FailedOp(err); !taken {
				return AttemptResult{}, err
			}
			current, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(rec.BrandID, rec.ID))
			return s.resultOf(current), err
		}
	}
	at := sender.Send(ctx, req)
	res, err := s.recordAttempt(ctx, rec, &at, &ep)
	res.Sent, res.Pace = true, endpoints.PaceOf(ep)
	return res, err
}

// request is what an attempt of rec to its endpoint, read as ep, sends; a
// webhook's body is its event's envelope.
func (s *Engine) request(ctx context.Context, rec endpoints.DeliveryRecord, ep store.Item, envelope []byte) (outgoing.Request, error) {
	var sub *endpoints.SubscriptionRecord
	if rec.Type != tally.DeliveryPostback {
		sub = &endpoints.SubscriptionRecord{}
		if err := records.Decode(ep, sub); err != nil {
			return outgoing.Request{}, err
		}
	}
	return s.requestTo(ctx, rec, sub, envelope)
}

// requestTo is request with the endpoint decoded: the subscription, its
// secrets as stored (opened here, to sign), or nil for a postback.
func (s *Engine) requestTo(ctx context.Context, rec endpoints.DeliveryRecord, sub *endpoints.SubscriptionRecord, envelope []byte) (outgoing.Request, error) {
	if sub != nil {
		opened, err := sub.Opened(ctx, s.secrets)
		if err != nil {
			return outgoing.Request{}, err
		}
		sub = &opened
	}
	req := rec.Request(sub, envelope, s.db.Now())
	req.Traceparent = trace.Next(rec.Trace)
	return req, nil
}

// claim holds a pending delivery's next attempt for this process until the
// lease runs out: a conditional write that only one process wins while the
// delivery is unchanged and nobody else's lease runs. It also moves the
// delivery's due entry to the lease's end, so that other processes leave
// it alone meanwhile and, should this one die before recording the
// attempt, make it then. Recording the attempt rewrites the item, which
// ends the lease. It fails with a condition failure when the attempt is
// taken.
func (s *Engine) claim(ctx context.Context, rec endpoints.DeliveryRecord, lease time.Duration) error {
	now := s.db.Now()
	until := now.Add(lease)
	it := endpoints.DeliveryItem(rec, s.deliveryRetention)
	it.GSI3.SK = keys.DueQueueSK(until, rec.ID)
	it.Nums = map[string]int64{"leaseUntil": until.UnixMilli()}
	return s.db.Transact(ctx, store.Put(it, store.AttrEquals("status", tally.DeliveryPending),
		store.AttrEquals("attempts", strconv.Itoa(len(rec.Attempts))), store.NumLess("leaseUntil", now.UnixMilli()+1)))
}

// recordAttempt appends an attempt (nil: the endpoint is gone, so the
// delivery fails without one), decides what follows, and records the
// outcome in the health of the endpoint, read before as ep. The write holds
// only if no other step recorded an attempt meanwhile.
func (s *Engine) recordAttempt(ctx context.Context, rec endpoints.DeliveryRecord, at *tally.Attempt, ep *store.Item) (AttemptResult, error) {
	before := rec.AsRead()
	now := s.db.Now()
	rec = s.withAttempt(rec, at, now)
	record := store.Put(s.answers.Item(ctx, rec), before)
	for {
		ops := []store.Op{record}
		if ep != nil && at != nil {
			if at.Gone() {
				ops = append(ops, s.health.GoneOp(*ep, now))
			} else if health, ok := s.health.OutcomeOp(*ep, outcomeOf(at, rec), now); ok {
				ops = append(ops, health)
			}
		}
		err := s.db.Transact(ctx, ops...)
		if i, failed := store.FailedOp(err); failed && i == 1 {
			// The endpoint changed since it was read: read it again.
			fresh, err := s.db.Get(ctx, rec.EndpointKey())
			switch {
			case errors.Is(err, store.ErrNotFound):
				ep = nil // deleted: nothing left to keep the health of
			case err != nil:
				return AttemptResult{}, err
			default:
				ep = &fresh
			}
			continue
		} else if failed {
			// Another step recorded this attempt first; report what it decided.
			current, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(rec.BrandID, rec.ID))
			return s.resultOf(current), err
		}
		if err == nil {
			s.recorded(rec, at)
		}
		return s.resultOf(rec), err
	}
}

// withAttempt is rec with an attempt appended (nil: the endpoint is gone,
// so the delivery fails without one) and what follows decided at now:
// succeeded on a 2xx, failed when the last attempt fails (or the address
// was refused), otherwise pending with the next attempt scheduled.
func (s *Engine) withAttempt(rec endpoints.DeliveryRecord, at *tally.Attempt, now time.Time) endpoints.DeliveryRecord {
	rec.Attempts = slices.Clip(rec.Attempts) // appends never share the caller's array
	rec.UpdatedAt = tally.NewTime(now)
	rec.NextAttemptAt, rec.Parked = nil, false
	switch {
	case at == nil:
		rec.Status = tally.DeliveryFailed
	case at.Succeeded():
		rec.Attempts = append(rec.Attempts, *at)
		rec.Status = tally.DeliverySucceeded
	case at.Gone():
		// The receiver says the endpoint is gone for good (its health
		// disables it): asking again would be asking a closed door.
		rec.Attempts = append(rec.Attempts, *at)
		rec.Status = tally.DeliveryFailed
	case at.Error == tally.AttemptBlocked:
		// The SSRF guard refused the receiver's address: asking again
		// would be refused again (or, after a DNS change, reach an
		// address that was refused for a reason). The attempt's error
		// says why in the delivery log; a manual retry can try anew.
		rec.Attempts = append(rec.Attempts, *at)
		rec.Status = tally.DeliveryFailed
	default:
		rec.Attempts = append(rec.Attempts, *at)
		if made := len(rec.Attempts) - rec.CycleStart; made >= MaxAttempts {
			rec.Status = tally.DeliveryFailed
		} else {
			// A receiver's Retry-After is honoured as given (not scaled),
			// when it asks for longer than the schedule.
			rec.NextAttemptAt = ptrTo(tally.NewTime(now.Add(max(s.retryWait(made), at.RetryAfter))))
		}
	}
	return rec
}

// outcomeOf is what attempt at, recorded on the delivery as rec, tells
// its endpoint's health.
func outcomeOf(at *tally.Attempt, rec endpoints.DeliveryRecord) endpoints.Outcome {
	switch {
	case at.Succeeded():
		return endpoints.Succeeded
	case rec.Status == tally.DeliveryFailed:
		return endpoints.Failed
	}
	return endpoints.Retrying
}

// retryWait is the wait after attempt made (1-based) failed.
func (s *Engine) retryWait(made int) time.Duration {
	return time.Duration(float64(RetrySchedule[made-1]) * s.retryScale)
}

func (s *Engine) resultOf(rec endpoints.DeliveryRecord) AttemptResult {
	res := AttemptResult{Status: rec.Status, Attempts: len(rec.Attempts) - rec.CycleStart, Cycle: rec.CycleStart}
	if rec.Status == tally.DeliveryPending && res.Attempts > 0 {
		res.RetryIn = s.retryWait(res.Attempts)
		if rec.NextAttemptAt != nil {
			// Longer when the receiver asked for it (Retry-After).
			res.RetryIn = max(res.RetryIn, rec.NextAttemptAt.Sub(rec.UpdatedAt.Time))
			res.NextAttemptAt = rec.NextAttemptAt
		}
	}
	return res
}

func ptrTo[T any](v T) *T { return &v }

// postbackDelivery makes the postback delivery of an event, if the event
// is one for a partner whose postback is enabled and fires on it (a test
// goes to its postback whatever its state), and the postback's item. The
// event item is as stored.
func (s *Engine) postbackDelivery(ctx context.Context, item store.Item, evt tally.Event, reads *Reads) (*endpoints.DeliveryRecord, store.Item, error) {
	var (
		partnerID string
		values    endpoints.PostbackValues
	)
	switch evt.Event {
	case tally.PostbackTestEvent:
		partnerID = item.Attrs["partnerId"]
		if err := json.Unmarshal(evt.Data, &values); err != nil {
			return nil, store.Item{}, err
		}
	case tally.EventConversionCreated, tally.EventConversionApproved, tally.EventConversionRejected, tally.EventConversionReversed:
		var data tally.ConversionEventData
		if err := json.Unmarshal(evt.Data, &data); err != nil {
			return nil, store.Item{}, err
		}
		partnerID = data.PartnerID
		values = endpoints.PostbackValues{ConversionID: data.ConversionID, OfferID: data.OfferID, PartnerID: data.PartnerID,
			PayoutCents: data.PayoutCents, Currency: data.Currency, Status: data.Status}
	default:
		return nil, store.Item{}, nil
	}
	pbItem, ok, err := reads.postback(ctx, s.db, evt.BrandID, partnerID)
	if err != nil || !ok {
		return nil, store.Item{}, err
	}
	var pb endpoints.PostbackRecord
	if err := records.Decode(pbItem, &pb); err != nil {
		return nil, store.Item{}, err
	}
	if evt.Event != tally.PostbackTestEvent && (pb.Status == tally.EndpointDisabled || !slices.Contains(pb.Events, evt.Event)) {
		return nil, store.Item{}, nil
	}
	if values.ConversionID != "" && evt.Event != tally.PostbackTestEvent {
		// The event carries sub1 only; the other macros come from the
		// conversion itself.
		c, err := records.Get[tally.Conversion](ctx, s.db, keys.Conversion(evt.BrandID, values.ConversionID))
		if err != nil {
			return nil, store.Item{}, err
		}
		values.ClickID, values.Subs = c.ClickID, [5]string{c.Sub1, c.Sub2, c.Sub3, c.Sub4, c.Sub5}
	}
	now := tally.NewTime(s.db.Now())
	return &endpoints.DeliveryRecord{Delivery: tally.Delivery{
		ID: s.deliveryID(evt, partnerID), BrandID: evt.BrandID, Type: tally.DeliveryPostback, EventID: evt.ID, Event: evt.Event,
		PartnerID: partnerID, URL: endpoints.FillPostback(pb.URL, evt.Event, values), Status: tally.DeliveryPending,
		Attempts: []tally.Attempt{}, NextAttemptAt: &now, CreatedAt: now, UpdatedAt: now,
	}}, pbItem, nil
}
