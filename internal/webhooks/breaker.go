package webhooks

import (
	"context"
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// The circuit breaker of a transport that runs one retry schedule per
// delivery (on AWS, a Step Functions execution each): while an endpoint is
// failing (breakerFailures attempts in a row failed), one delivery probes it on its
// schedule and the endpoint's other new deliveries wait, parked, instead of
// each running a schedule of its own against an endpoint known to be down.
//
//	probe   the endpoint's attr: the delivery probing it while it fails
//	parked  a pending delivery with no attempt that waits for its endpoint;
//	        its gsi3 key is the endpoint's wait list (parkedPK), not the
//	        due queue, so nothing attempts it until it is released
//	breaker one item per endpoint that had a probe (breakerKey), in gsi3
//	        under breakerPK: where Released looks for wait lists; attrs
//	        claimedAt (unix ms of the last claim) and emptyAt (unix ms
//	        Released first found the endpoint past its outage with nothing
//	        waiting, 0 while not); once that held for breakerRetire,
//	        Released skips it until a claim writes it anew (the TTL
//	        takes it a retention after the last claim)
//
// Released, called by the transport on a schedule (the reconciler on AWS),
// lets parked deliveries go once the probe is decided: all of them when the
// endpoint recovered (or was disabled, or deleted: their attempt decides
// them without a request). When the probe failed its whole schedule and the
// endpoint is still failing, the deliveries that were waiting when the
// probe started are failed (the endpoint failed every attempt of a
// schedule as long as theirs while they waited), and the oldest of the rest
// is let go to become the next probe. So a delivery is decided within about
// two schedules, as the retry schedule's 6 attempts would, with one
// execution per endpoint instead of one per delivery.

// breakerFailures is how many consecutive failed attempts open an
// endpoint's circuit: a receiver that fails now and then keeps every
// delivery on its own schedule.
const breakerFailures = 3

// breakerRetire is how long an endpoint past its outage must have nothing
// waiting before Released stops reading its wait list (32 queries). Nothing parks without a live probe,
// and a probe needs a failing endpoint and a claim (which writes the item
// anew), so only a park decided from a read made before the endpoint
// recovered can come later: within one deliver invocation (30 s).
const breakerRetire = 10 * time.Minute

// breakerPK is the gsi3 partition of the breaker items: written once per
// probe, read by each reconciler run.
const breakerPK = "BREAKER"

// breakerRecord is the breaker item: which endpoint.
type breakerRecord struct {
	BrandID    string `json:"brandId"`
	Type       string `json:"type"`
	EndpointID string `json:"endpointId"`
}

// FirstAttempt is Attempt's attempt 1 behind the circuit breaker, of the
// delivery a transport's message names, or carries when Dispatch did not
// write it (it is written once, with what follows, and its event leaves
// the outbox once its siblings are written too). When the delivery's
// endpoint is failing and another delivery probes it, the delivery is
// parked instead (the result says Parked: start no schedule); when it is
// failing and nobody probes it, this delivery becomes the probe. A disabled endpoint gets nothing: the
// delivery fails without a request. Test events (webhook.test,
// postback.test) are always sent, as on a healthy endpoint.
func (s *Engine) FirstAttempt(ctx context.Context, msg DeliveryMessage, sender Sender) (AttemptResult, error) {
	rec, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(msg.BrandID, msg.DeliveryID))
	if errors.Is(err, store.ErrNotFound) && msg.Planned != nil {
		rec, err = msg.planned()
	}
	if err != nil {
		return AttemptResult{}, records.NotFound(err, "delivery", msg.DeliveryID)
	}
	if msg.Planned == nil {
		return s.firstAttempt(ctx, rec, nil, sender)
	}
	if msg.Envelope != nil { // an event made from the stream: not read, and in no outbox
		return s.firstAttempt(ctx, rec, msg.Envelope, sender)
	}
	// Once the event's deliveries are written (this one now, or by an
	// earlier step whose message came again), its work is done.
	event, err := s.db.Get(ctx, keys.Event(rec.EventID))
	if errors.Is(err, store.ErrNotFound) {
		return s.firstAttempt(ctx, rec, nil, sender) // expired: its attempt fails
	}
	if err != nil {
		return AttemptResult{}, err
	}
	res, err := s.firstAttempt(ctx, rec, event.Data, sender)
	if err != nil || res.Paced || !inOutbox(event) {
		// A paced delivery may be unwritten still: its event stays in the
		// outbox until its turn comes.
		return res, err
	}
	// The sibling written last sees the others: each reads after its own
	// write, strongly consistent.
	if all, err := written(ctx, s.db, msg.BrandID, msg.Siblings); err != nil || !all {
		return res, err
	}
	return res, leaveOutbox(ctx, s.db, event)
}

// firstAttempt is FirstAttempt on the delivery rec, stored or planned; a
// webhook's envelope is read from the event unless given.
func (s *Engine) firstAttempt(ctx context.Context, rec endpoints.DeliveryRecord, envelope []byte, sender Sender) (AttemptResult, error) {
	if rec.Status != tally.DeliveryPending || len(rec.Attempts) > rec.CycleStart {
		return s.resultOf(rec), nil
	}
	for {
		ep, err := s.db.Get(ctx, rec.EndpointKey())
		if errors.Is(err, store.ErrNotFound) {
			return s.recordAttempt(ctx, rec, nil, nil) // nowhere to send
		}
		if err != nil {
			return AttemptResult{}, err
		}
		h := endpoints.HealthOf(ep)
		// A test event is someone checking the endpoint now: it is sent.
		test := rec.Event == tally.EventWebhookTest || rec.Event == tally.PostbackTestEvent
		if h.Status == tally.EndpointDisabled && !test {
			return s.recordAttempt(ctx, rec, nil, nil)
		}
		if probe := ep.Attrs["probe"]; h.Fails >= breakerFailures && probe != rec.ID && !test {
			if probe != "" {
				live, err := pendingDelivery(ctx, s.db, rec.BrandID, probe)
				if err != nil {
					return AttemptResult{}, err
				}
				if live {
					return s.park(ctx, rec)
				}
			}
			if rec.Unsaved {
				// A probe is written before it claims, so that the
				// deliveries parking behind it find it pending.
				err := s.db.Transact(ctx, store.Put(endpoints.DeliveryItem(rec, s.deliveryRetention), store.NotExists()))
				if _, exists := store.FailedOp(err); exists {
					// Written by a step of a repeated message meanwhile.
					if rec, err = records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(rec.BrandID, rec.ID)); err != nil {
						return AttemptResult{}, err
					}
					return s.firstAttempt(ctx, rec, envelope, sender)
				}
				if err != nil {
					return AttemptResult{}, err
				}
				rec.Unsaved = false
			}
			err = s.claimProbe(ctx, rec, ep)
			if _, changed := store.FailedOp(err); changed {
				continue // the endpoint changed meanwhile: decide again
			}
			if err != nil {
				return AttemptResult{}, err
			}
			if ep, err = s.db.Get(ctx, rec.EndpointKey()); err != nil {
				return AttemptResult{}, err
			}
		}
		// Healthy, or a failure or two (no circuit yet), or this is the probe.
		return s.send(ctx, rec, ep, envelope, sender, 0)
	}
}

// pendingDelivery says whether the brand's delivery id is stored, pending.
func pendingDelivery(ctx context.Context, db *records.DB, brandID, id string) (bool, error) {
	it, err := db.Get(ctx, keys.Delivery(brandID, id))
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil && it.Attrs["status"] == tally.DeliveryPending, err
}

// claimProbe makes rec the probe of its endpoint, read as ep, and makes sure
// the endpoint's breaker item exists (refreshing its expiry).
func (s *Engine) claimProbe(ctx context.Context, rec endpoints.DeliveryRecord, ep store.Item) error {
	// The breaker item first: a delivery parks only behind a probe, so
	// whatever parks can be found.
	brk := store.Item{
		Key:       keys.Breaker(rec.BrandID, rec.EndpointID()),
		GSI3:      store.IndexKey{PK: breakerPK, SK: rec.BrandID + "#" + rec.EndpointID()},
		Attrs:     map[string]string{"claimedAt": strconv.FormatInt(s.db.Now().UnixMilli(), 10), "emptyAt": "0"},
		Data:      records.MustJSON(breakerRecord{BrandID: rec.BrandID, Type: rec.Type, EndpointID: rec.EndpointID()}),
		ExpiresAt: s.db.Now().Add(s.deliveryRetention + 24*time.Hour).Unix(),
	}
	if err := s.db.Transact(ctx, store.Put(brk)); err != nil {
		return err
	}
	claim := store.Op{Kind: store.OpUpdate, Key: ep.Key, Set: map[string]string{"probe": rec.ID}, Add: map[string]int64{"rev": 1},
		Conds: []store.Cond{store.Exists(), store.NumEquals("rev", endpoints.HealthOf(ep).Rev)}}
	return s.db.Transact(ctx, claim)
}

// park puts a delivery on its endpoint's wait list.
func (s *Engine) park(ctx context.Context, rec endpoints.DeliveryRecord) (AttemptResult, error) {
	conds := []store.Cond{rec.AsRead()}
	if !rec.Unsaved {
		conds = append(conds, store.AttrEquals("status", tally.DeliveryPending))
	}
	rec.Parked, rec.NextAttemptAt, rec.UpdatedAt = true, nil, tally.NewTime(s.db.Now())
	err := s.db.Transact(ctx, store.Put(endpoints.DeliveryItem(rec, s.deliveryRetention), conds...))
	if _, changed := store.FailedOp(err); changed {
		current, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(rec.BrandID, rec.ID))
		return s.resultOf(current), err
	}
	if err != nil {
		return AttemptResult{}, err
	}
	res := s.resultOf(rec)
	res.Parked = true
	return res, nil
}

// Release is what Released found.
type Release struct {
	Refs       []endpoints.DeliveryRef // to queue as new deliveries
	Failed     int                     // failed: they waited out a probe's failed schedule
	Watched    int                     // endpoints whose wait lists were read
	Unfinished int                     // endpoints left for the next call: out of time or over limit
	Skipped    []Skipped               // endpoints whose breaker item could not be read or acted on (skip)
}

// releaseWorkers bounds the endpoints Released reads at once: each takes
// some 35 sequential reads.
const releaseWorkers = 8

// Released returns the parked deliveries that may go now (see above), at
// most limit, for the transport to queue as new deliveries: FirstAttempt
// then attempts them, or parks them again. A delivery stays on its wait
// list until it is attempted, so one queued but not yet attempted is
// released again by the next call; attempts are idempotent. It fails the
// deliveries that waited out a probe's failed schedule itself (at most
// limit too). It reads releaseWorkers endpoints at a time, in random
// order, and starts none
// once ctx is done: what one in progress then found is dropped, and an
// endpoint not finished is read again by the next call, as is one whose
// breaker item it skipped once its backoff ends. Only an error reading the
// breaker items themselves is returned.
func (s *Engine) Released(ctx context.Context, limit int) (Release, error) {
	var r Release
	var todo []store.Item
	var cursor string
	now := s.db.Now()
	for {
		page, err := s.db.Query(ctx, store.Query{Index: store.GSI3, PK: breakerPK, Cursor: cursor, Limit: records.MaxScan})
		if err != nil {
			return r, err
		}
		for _, it := range page.Items {
			if since, _ := strconv.ParseInt(it.Attrs["emptyAt"], 10, 64); since != 0 && now.Sub(time.UnixMilli(since)) >= breakerRetire {
				continue // retired: nothing can be waiting
			}
			if !backingOff(it, now) {
				todo = append(todo, it)
			}
		}
		if cursor = page.Cursor; cursor == "" {
			break
		}
	}
	// In random order: runs that run out of time do not leave the same
	// endpoints behind each time.
	rand.Shuffle(len(todo), func(i, j int) { todo[i], todo[j] = todo[j], todo[i] })
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		next = make(chan store.Item)
	)
	for range releaseWorkers {
		wg.Go(func() {
			for it := range next {
				mu.Lock()
				room := min(limit-len(r.Refs), limit-r.Failed)
				mu.Unlock()
				if room <= 0 || ctx.Err() != nil {
					mu.Lock()
					r.Unfinished++
					mu.Unlock()
					continue
				}
				refs, failed, more, err := s.releasedItem(ctx, it, room)
				var sk Skipped
				if err != nil && ctx.Err() == nil {
					sk = skip(ctx, s.db, it, err)
				}
				mu.Lock()
				switch {
				case ctx.Err() != nil:
					r.Unfinished++
				case err != nil:
					r.Skipped = append(r.Skipped, sk)
				default:
					r.Watched++
					r.Refs, r.Failed = append(r.Refs, refs...), r.Failed+failed
					if more {
						r.Unfinished++
					}
				}
				mu.Unlock()
			}
		})
	}
	for _, it := range todo {
		next <- it
	}
	close(next)
	wg.Wait()
	if len(r.Refs) > limit {
		r.Refs = r.Refs[:limit] // the rest stay parked for the next call
	}
	return r, nil
}

// releasedItem is Released for the endpoint of the breaker item it.
func (s *Engine) releasedItem(ctx context.Context, it store.Item, limit int) ([]endpoints.DeliveryRef, int, bool, error) {
	var brk breakerRecord
	if err := records.Decode(it, &brk); err != nil {
		return nil, 0, false, err
	}
	return s.releasedFrom(ctx, it, brk, limit)
}

// releasedFrom is Released for one endpoint, whose breaker item is it:
// the deliveries to queue, how many it failed, and whether limit left
// some of either.
func (s *Engine) releasedFrom(ctx context.Context, it store.Item, brk breakerRecord, limit int) ([]endpoints.DeliveryRef, int, bool, error) {
	// more notes that a wait list read in full had deliveries beyond
	// limit: the endpoint is left unfinished, for the next call.
	more := false
	parked := func(upTo string, limit int) ([]endpoints.DeliveryRef, bool, error) {
		q := newShardedQueue(s.db, store.GSI3, func(shard int) string { return keys.ParkedPK(brk.BrandID, brk.EndpointID, shard) }, upTo, limit)
		items, err := q.next(ctx, limit)
		refs := make([]endpoints.DeliveryRef, len(items))
		for i, it := range items {
			refs[i] = endpoints.DeliveryRef{BrandID: brk.BrandID, DeliveryID: it.Key.SK}
		}
		return refs, !q.drained(), err
	}
	key := keys.Subscription(brk.BrandID, brk.EndpointID)
	if brk.Type == tally.DeliveryPostback {
		key = keys.Postback(brk.BrandID, brk.EndpointID)
	}
	ep, err := s.db.Get(ctx, key)
	switch {
	case errors.Is(err, store.ErrNotFound):
		// Deleted: each attempt fails its delivery.
	case err != nil:
		return nil, 0, false, err
	default:
		h := endpoints.HealthOf(ep)
		if h.Status == tally.EndpointDisabled || h.Fails < breakerFailures {
			break // all go
		}
		failed, more := 0, false
		if probe := ep.Attrs["probe"]; probe != "" {
			rec, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(brk.BrandID, probe))
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				return nil, 0, false, err
			case rec.Status == tally.DeliveryPending:
				return nil, 0, false, nil // the probe is under way
			case rec.Status == tally.DeliveryFailed && len(rec.Attempts)-rec.CycleStart >= MaxAttempts:
				var waited []endpoints.DeliveryRef
				waited, more, err = parked(ids.Ceil("wh_", rec.Attempts[rec.CycleStart].At.Time), limit)
				if err != nil {
					return nil, 0, false, err
				}
				for _, ref := range waited {
					abandoned, err := s.abandonParked(ctx, ref, rec.Attempts[len(rec.Attempts)-1].At.Time)
					if err != nil {
						return nil, failed, false, err
					}
					if abandoned {
						failed++
					}
				}
			}
		}
		// Failing, nobody probes: the oldest is the next probe.
		next, _, err := parked("", 1)
		return next, failed, more, err
	}
	refs, more, err := parked("", limit)
	if err != nil {
		return nil, 0, false, err
	}
	return refs, 0, more, retire(ctx, s.db, it, len(refs) == 0)
}

// retire notes on an endpoint's breaker item, read as it, whether its
// endpoint (past its outage) has nothing waiting, and since when. The write
// holds only if no claim came meanwhile.
func retire(ctx context.Context, db *records.DB, it store.Item, empty bool) error {
	was := it.Attrs["emptyAt"]
	switch {
	case empty && was == "0":
		it.Attrs = map[string]string{"claimedAt": it.Attrs["claimedAt"], "emptyAt": strconv.FormatInt(db.Now().UnixMilli(), 10)}
	case !empty && was != "0":
		it.Attrs = map[string]string{"claimedAt": it.Attrs["claimedAt"], "emptyAt": "0"}
	default:
		return nil
	}
	err := db.Transact(ctx, store.Put(it, store.AttrEquals("claimedAt", it.Attrs["claimedAt"]), store.AttrEquals("emptyAt", was)))
	if _, changed := store.FailedOp(err); changed {
		return nil // claimed again meanwhile: the next run sees it
	}
	return err
}
