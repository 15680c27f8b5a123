package tracking

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// Pipeline delivers webhooks inside one process (the local server). Its
// queue is the store itself: events wait in the outbox index until fanned
// out, and pending deliveries wait in the due index until their next
// attempt. A restart, even a kill -9, loses nothing: the pipeline finds both
// again and goes on, on schedule. An attempt cut off by a crash is made
// again (at least once; receivers de-duplicate on the webhook id).
//
// On AWS the same two steps, FanOut and Attempt, run from the stream, the
// queue and the state machine instead.
type Pipeline struct {
	svc     *Service
	sender  Sender
	workers int
	log     *slog.Logger
	wake    chan struct{}

	mu       sync.Mutex
	inFlight map[string]bool
}

// maxIdle is the longest the pipeline sleeps without looking at its queues.
const maxIdle = time.Second

// NewPipeline returns a pipeline that sends with sender using workers
// concurrent steps.
func (s *Service) NewPipeline(sender Sender, workers int, log *slog.Logger) *Pipeline {
	p := &Pipeline{svc: s, sender: sender, workers: workers, log: log, wake: make(chan struct{}, 1), inFlight: map[string]bool{}}
	s.onEvent = p.Wake
	return p
}

// Wake makes the pipeline look at its queues now.
func (p *Pipeline) Wake() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

type step struct {
	key     string // in-flight key
	eventID string // a fan-out, or
	ref     DeliveryRef
	attempt int // an attempt
}

// Run delivers until ctx ends, then waits for the steps under way (an
// attempt takes at most the sender's timeout).
func (p *Pipeline) Run(ctx context.Context) {
	steps := make(chan step)
	var wg sync.WaitGroup
	for range p.workers {
		wg.Go(func() {
			for st := range steps {
				p.run(st)
			}
		})
	}
	defer wg.Wait()
	defer close(steps)
	for {
		next, err := p.dispatch(ctx, steps)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.log.Error("webhook pipeline", "err", err.Error())
			next = maxIdle
		}
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// run performs one step. Steps outlive shutdown's cancellation so that an
// attempt under way is recorded rather than cut off and counted as failed.
func (p *Pipeline) run(st step) {
	ctx := context.Background()
	defer func() {
		p.release(st.key)
		p.Wake() // what this step did may make something due
	}()
	if st.eventID == "" {
		p.attempt(ctx, st.ref, st.attempt)
		return
	}
	refs, err := p.svc.FanOut(ctx, st.eventID)
	if err != nil {
		p.log.Error("webhook fan-out", "eventId", st.eventID, "err", err.Error())
		return
	}
	// The new deliveries are due now: attempt them here rather than wait for
	// the next pass over the due queue.
	for _, ref := range refs {
		if p.claim(ref.DeliveryID) {
			p.attempt(ctx, ref, 1)
			p.release(ref.DeliveryID)
		}
	}
}

func (p *Pipeline) attempt(ctx context.Context, ref DeliveryRef, n int) {
	res, err := p.svc.Attempt(ctx, ref, n, p.sender)
	if err != nil {
		p.log.Error("webhook attempt", "deliveryId", ref.DeliveryID, "attempt", n, "err", err.Error())
		return
	}
	if res.Sent {
		p.log.Debug("webhook attempt", "deliveryId", ref.DeliveryID, "attempt", n, "status", res.Status)
	}
}

// claim marks a step as under way; it reports false when it already was.
func (p *Pipeline) claim(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inFlight[key] {
		return false
	}
	p.inFlight[key] = true
	return true
}

func (p *Pipeline) release(key string) {
	p.mu.Lock()
	delete(p.inFlight, key)
	p.mu.Unlock()
}

// dispatch hands every ready step to the workers and returns how long the
// pipeline may sleep before the next attempt falls due.
func (p *Pipeline) dispatch(ctx context.Context, steps chan<- step) (time.Duration, error) {
	pass := min(p.workers, 1000) // the store's largest page
	next := maxIdle
	for shard := range queueShards {
		// Each pass takes a bounded share of each queue, so that a stream of
		// new events cannot keep due retries waiting.
		page, err := p.svc.store.Query(ctx, store.Query{Index: store.GSI3, PK: outboxPK(shard), Limit: pass})
		if err != nil {
			return 0, err
		}
		for _, it := range page.Items {
			if !p.send(ctx, steps, step{key: it.GSI3.SK, eventID: it.GSI3.SK}) {
				return 0, nil
			}
		}
		if page.Cursor != "" {
			next = 0 // more are waiting: come straight back
		}
	}
	now := p.svc.Now()
	for shard := range queueShards {
		page, err := p.svc.store.Query(ctx, store.Query{Index: store.GSI3, PK: dueQueuePK(shard), SKTo: dueQueueSK(now, "~"), Limit: pass})
		if err != nil {
			return 0, err
		}
		for _, it := range page.Items {
			var rec deliveryRecord
			if err := decode(it, &rec); err != nil {
				return 0, err
			}
			st := step{key: rec.ID, ref: DeliveryRef{BrandID: rec.BrandID, DeliveryID: rec.ID}, attempt: len(rec.Attempts) - rec.CycleStart + 1}
			if !p.send(ctx, steps, st) {
				return 0, nil
			}
		}
		if page.Cursor != "" {
			next = 0
		}
		// The earliest entry not yet due sets the next wake-up.
		later, err := p.svc.store.Query(ctx, store.Query{Index: store.GSI3, PK: dueQueuePK(shard), SKFrom: dueQueueSK(now, "~"), Limit: 1})
		if err != nil {
			return 0, err
		}
		if len(later.Items) == 1 {
			if due, ok := dueTime(later.Items[0].GSI3.SK); ok {
				next = min(next, max(due.Sub(now), 0))
			}
		}
	}
	return next, nil
}

// send hands a step to a worker unless it is under way already; it reports
// false when ctx ended.
func (p *Pipeline) send(ctx context.Context, steps chan<- step, st step) bool {
	if !p.claim(st.key) {
		return true
	}
	select {
	case steps <- st:
		return true
	case <-ctx.Done():
		return false
	}
}

// dueTime reads the time out of a due-queue sort key.
func dueTime(sk string) (time.Time, bool) {
	ms, _, _ := strings.Cut(sk, "#")
	n, err := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n), err == nil
}
