package webhooks

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Pipeline delivers webhooks inside one process (the local server). Its
// queue is the store itself: events wait in the outbox index until fanned
// out, and pending deliveries wait in the due index until their next
// attempt. A restart, even a kill -9, loses nothing: the pipeline finds both
// again and goes on, on schedule. An attempt cut off by a crash is made
// again (at least once; receivers de-duplicate on the webhook id).
//
// Within the process nothing is polled for: an event written here is handed
// to the fan-out workers at once, whose deliveries go straight to the
// attempt scheduler, and a retry sets the timer for when it falls due. The
// indexes are read at start, once a second (events and manual retries of
// other processes or requests; what overflowed the in-memory queues) and
// when a retry falls due.
// Fan-out has its own workers, so that it never waits behind attempts, and
// attempts are scheduled fairly across brands and endpoints (scheduler).
// On the embedded store a fan-out makes the first attempts that have room
// itself, and records them in its own write (fanOut).
//
// On AWS the same two steps, FanOut and Attempt, run from the stream, the
// queue and the state machine instead.
type Pipeline struct {
	svc    *Engine
	sender Sender
	log    *slog.Logger
	// lease, when set, makes each attempt claim its delivery in the store
	// before sending, for a store that several processes deliver from.
	lease time.Duration
	// fast: first attempts are made before their fan-out is written and
	// recorded with it (fanOut), on a store that commits a process's
	// writes together and that no other process delivers from.
	fast bool
	// firstWait is how long a fan-out waits for the answers to the first
	// attempts it made (firstAttemptWait).
	firstWait time.Duration
	sched     *scheduler
	fanouts   chan string   // events to fan out
	scan      chan struct{} // read the indexes now
	retry     chan struct{} // soonest moved

	mu      sync.Mutex
	fanning map[string]bool // events queued for fan-out or under way
	soonest time.Time       // the earliest retry set since the due index was read
	// back holds, per shard, a due-index key at or before every retry set
	// since the due index was read: a short wait may put a retry behind
	// where the reading stopped.
	back [keys.QueueShards]string
}

const (
	// maxIdle is the longest the pipeline goes without reading its indexes.
	maxIdle = time.Second
	// fanOutWorkers fan out concurrently, so that their writes share
	// commits, each up to fanOutBatch events in one transaction.
	fanOutWorkers = 8
	fanOutBatch   = 32
	// fanOutQueue is how many events wait in memory for fan-out; more wait
	// in the outbox.
	fanOutQueue = 10_000
	// maxQueued is how many attempts the scheduler holds in memory; more
	// wait in the due index.
	maxQueued = 100_000
	// scanPage is how many index entries one read takes.
	scanPage = 1000
	// attemptLease is how long a claimed attempt is its process's alone: far
	// longer than an attempt may take (delivery.DefaultTimeout, 10 s).
	attemptLease = time.Minute
)

// PipelineOption configures a Pipeline.
type PipelineOption func(*Pipeline)

// SharedStore makes the pipeline safe to run in several processes on one
// store (DynamoDB): each attempt first claims its delivery with a
// conditional write that holds it for attemptLease, so that exactly one
// process sends it. A process that dies holding a claim leaves the attempt
// due again when the claim runs out.
func SharedStore() PipelineOption { return func(p *Pipeline) { p.lease = attemptLease } }

// NewPipeline returns a pipeline that sends with sender. Each brand has up
// to workers attempts under way at once, all brands together four times as
// many.
func NewPipeline(s *Engine, sender Sender, workers int, log *slog.Logger, opts ...PipelineOption) *Pipeline {
	p := &Pipeline{svc: s, sender: sender, log: log, fanouts: make(chan string, fanOutQueue), scan: make(chan struct{}, 1), retry: make(chan struct{}, 1), fanning: map[string]bool{}}
	p.sched = newScheduler(4*workers, workers, p.attempt)
	for _, o := range opts {
		o(p)
	}
	p.fast, p.firstWait = p.lease == 0 && s.writes.batched(), firstAttemptWait
	return p
}

// Wake makes the pipeline read its indexes now.
func (p *Pipeline) Wake() {
	select {
	case p.scan <- struct{}{}:
	default:
	}
}

// Queue hands events just written to the fan-out workers (the outbox
// Writer is told to, in this process).
func (p *Pipeline) Queue(ids []string) {
	for _, id := range ids {
		if !p.claimEvent(id) {
			continue
		}
		select {
		case p.fanouts <- id:
		default:
			p.releaseEvent(id) // it waits in the outbox for the next pass
		}
	}
}

// Run delivers until ctx ends, then waits for the steps under way (an
// attempt takes at most the sender's timeout).
func (p *Pipeline) Run(ctx context.Context) {
	var fanners sync.WaitGroup
	for range fanOutWorkers {
		fanners.Go(func() {
			for {
				select {
				case <-ctx.Done():
					return
				case id := <-p.fanouts:
					p.fanOut(p.drain(id))
				}
			}
		})
	}
	defer p.sched.close()
	defer fanners.Wait()
	outbox, due := &indexReader{pk: keys.OutboxPK}, &indexReader{pk: keys.DueQueuePK}
	for {
		next, more, err := p.pass(ctx, outbox, due)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			p.log.Error("webhook pipeline", "err", err.Error())
			next, more = maxIdle, false
		}
		if !more && !p.sleep(ctx, next) {
			return
		}
	}
}

// sleep waits until the pipeline should read its indexes again: when woken,
// after next, or when a retry set meanwhile falls due. It reports false
// when ctx ended.
func (p *Pipeline) sleep(ctx context.Context, next time.Duration) bool {
	for {
		p.mu.Lock()
		if !p.soonest.IsZero() {
			next = min(next, max(p.soonest.Sub(p.svc.db.Now()), 0))
		}
		p.mu.Unlock()
		t := time.NewTimer(next)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-p.scan:
		case <-t.C:
		case <-p.retry:
			t.Stop()
			continue
		}
		t.Stop()
		return true
	}
}

// pass reads a page of each index partition, from where the previous pass
// stopped, and queues what it finds that is not queued already. It returns
// how long the pipeline may sleep before the next retry falls due, and
// whether more entries wait to be read.
func (p *Pipeline) pass(ctx context.Context, outbox, due *indexReader) (next time.Duration, more bool, err error) {
	p.mu.Lock()
	p.soonest = time.Time{}
	fanning := len(p.fanning)
	back := p.back
	p.back = [keys.QueueShards]string{}
	p.mu.Unlock()
	now := p.svc.db.Now()
	outbox.rewindIf(fanning == 0, now)
	due.backTo(back)
	for shard := range keys.QueueShards {
		if len(p.fanouts) > fanOutQueue/2 {
			break // the fan-out workers have plenty; the rest waits in the outbox
		}
		page, full, err := outbox.read(ctx, p.svc.db, shard, "")
		if err != nil {
			return 0, false, err
		}
		more = more || full
		ids := make([]string, len(page))
		for i, it := range page {
			ids[i] = it.GSI3.SK
		}
		p.Queue(ids)
	}
	next = maxIdle
	due.rewindIf(p.sched.queued() == 0, now)
	for shard := range keys.QueueShards {
		if p.sched.queued() >= maxQueued {
			break // the rest waits in the index until the scheduler has room
		}
		page, full, err := due.read(ctx, p.svc.db, shard, keys.DueQueueSK(now, "~"))
		if err != nil {
			return 0, false, err
		}
		more = more || full
		var jobs []job
		for _, it := range page {
			if _, id, _ := strings.Cut(it.GSI3.SK, "#"); p.sched.has(id) {
				continue
			}
			var rec endpoints.DeliveryRecord
			if err := records.Decode(it, &rec); err != nil {
				return 0, false, err
			}
			jobs = append(jobs, jobOf(rec))
		}
		p.sched.add(jobs...)
		// The earliest entry not yet due sets the next wake-up.
		later, err := p.svc.db.Query(ctx, store.Query{Index: store.GSI3, PK: keys.DueQueuePK(shard), SKFrom: keys.DueQueueSK(now, "~"), Limit: 1})
		if err != nil {
			return 0, false, err
		}
		if len(later.Items) == 1 {
			if at, ok := dueTime(later.Items[0].GSI3.SK); ok {
				next = min(next, max(at.Sub(now), 0))
			}
		}
	}
	return next, more, nil
}

// indexReader reads the partitions of a gsi3 queue index a page at a time
// across passes, going on after the last entry it read: new entries sort
// after it (event ids and due times grow), so it reads each entry about
// once while the pipeline works through a backlog, rather than the whole
// backlog every pass. It reads from the start again when the pipeline has
// nothing of the index under way, and at least every rescan, to find what
// lies behind its position and nobody took (an attempt that failed on a
// store error, another process's entry stamped by a slower clock).
type indexReader struct {
	pk      func(shard int) string
	at      [keys.QueueShards]string
	rewound time.Time
}

// rescan is the longest an index goes without a read from the start.
const rescan = 10 * time.Second

func (r *indexReader) rewindIf(idle bool, now time.Time) {
	if idle || now.Sub(r.rewound) >= rescan || now.Before(r.rewound) {
		r.at, r.rewound = [keys.QueueShards]string{}, now
	}
}

// backTo moves the reading back to the given keys where they lie before
// it ("": leave the shard as it is).
func (r *indexReader) backTo(keys [keys.QueueShards]string) {
	for shard, key := range keys {
		if key != "" && r.at[shard] > key {
			r.at[shard] = key
		}
	}
}

// read reads the next page of a partition up to skTo ("": to the end); it
// reports whether the page was full (more may follow).
func (r *indexReader) read(ctx context.Context, st store.Store, shard int, skTo string) ([]store.Item, bool, error) {
	q := store.Query{Index: store.GSI3, PK: r.pk(shard), SKTo: skTo, Limit: scanPage}
	if at := r.at[shard]; at != "" && (skTo == "" || at < skTo) {
		q.SKFrom = at + "\x01" // just after it: keys hold no control characters
	}
	page, err := st.Query(ctx, q)
	if err != nil {
		return nil, false, err
	}
	if n := len(page.Items); n > 0 {
		r.at[shard] = page.Items[n-1].GSI3.SK
	}
	return page.Items, page.Cursor != "", nil
}

func jobOf(rec endpoints.DeliveryRecord) job {
	return job{ref: endpoints.DeliveryRef{BrandID: rec.BrandID, DeliveryID: rec.ID}, endpoint: rec.EndpointID(), attempt: len(rec.Attempts) - rec.CycleStart + 1}
}

// drain takes the events waiting behind first, up to a batch.
func (p *Pipeline) drain(first string) []string {
	ids := []string{first}
	for len(ids) < fanOutBatch {
		select {
		case id := <-p.fanouts:
			ids = append(ids, id)
		default:
			return ids
		}
	}
	return ids
}

// fanOut fans events out and queues their first attempts. It outlives
// shutdown's cancellation, so that a fan-out under way is committed.
//
// Where it may (fast), it makes attempt 1 before the fan-out is written and
// records it in the fan-out's write: one durable write per delivery instead
// of two, and no commit between an event and its webhook. Only deliveries
// whose endpoint has room in the scheduler now go that way, holding their
// place there as any attempt (fair across brands and endpoints; a hanging
// endpoint has room for one); the others are queued as pending. The write
// waits at most firstAttemptWait for the answers; a delivery whose answer
// is late is written pending, and its attempt recorded when it comes. The
// event stays in the outbox until the write commits: a crash before makes
// attempt 1 again after the restart, under the same webhook id (at least
// once, as for any attempt cut off).
func (p *Pipeline) fanOut(eventIDs []string) {
	defer func() {
		for _, id := range eventIDs {
			p.releaseEvent(id)
		}
	}()
	ctx := context.Background()
	plans, err := p.svc.planFanOuts(ctx, eventIDs)
	if err != nil {
		p.log.Error("webhook fan-out", "eventIds", eventIDs, "err", err.Error())
	}
	for _, plan := range plans {
		for i, rec := range plan.recs {
			p.sched.setPace(rec.BrandID, rec.EndpointID(), plan.pace(i))
		}
	}
	var firsts []*fastAttempt
	if p.fast {
		firsts = p.attemptFirst(plans)
	}
	recs, err := p.svc.writeFanOuts(ctx, plans)
	if err != nil {
		p.log.Error("webhook fan-out", "eventIds", eventIDs, "err", err.Error())
	}
	jobs := make([]job, len(recs))
	for i, rec := range recs {
		jobs[i] = jobOf(rec)
	}
	p.sched.add(jobs...)
	for _, f := range firsts {
		p.settle(f)
	}
}

// firstAttemptWait is how long a fan-out waits for the answers to the first
// attempts it made: far longer than a healthy receiver takes, and short
// enough that one that hangs delays the others' writes little.
const firstAttemptWait = 100 * time.Millisecond

// fastAttempt is a first attempt the pipeline made before the fan-out's
// write.
type fastAttempt struct {
	*firstAttempt
	job   job
	ep    store.Item
	began time.Time // by the wall clock, to tell quick answers from slow
	from  time.Time // by the service's clock, to set the retry's timer
	done  func(outcome)
}

// attemptFirst sends attempt 1 of the planned deliveries whose endpoints
// have room in the scheduler, and waits for the answers up to
// firstWait; those that came are marked to be recorded with the
// fan-out.
func (p *Pipeline) attemptFirst(plans []*fanOutPlan) []*fastAttempt {
	var firsts []*fastAttempt
	for _, plan := range plans {
		for i, rec := range plan.recs {
			j := jobOf(rec)
			req, err := p.svc.requestTo(context.Background(), rec, plan.subs[i], plan.event.Data)
			if err != nil {
				continue // no fast attempt: the delivery's attempt tells the error
			}
			done, ok := p.sched.reserve(j)
			if !ok {
				continue
			}
			f := &fastAttempt{firstAttempt: &firstAttempt{sent: make(chan struct{})}, job: j, ep: plan.eps[i], began: time.Now(), from: p.svc.db.Now(), done: done}
			plan.first[i] = f.firstAttempt
			firsts = append(firsts, f)
			go func() {
				f.at = p.sender.Send(context.Background(), req)
				close(f.sent)
			}()
		}
	}
	timeout := time.NewTimer(p.firstWait)
	defer timeout.Stop()
wait:
	for _, f := range firsts {
		select {
		case <-f.sent:
		case <-timeout.C:
			break wait
		}
	}
	for _, f := range firsts {
		select {
		case <-f.sent:
			// A 410 disables its endpoint, which the batched write does
			// not do: it is recorded after the write, as a late answer.
			f.answered = !f.at.Gone()
		default:
		}
	}
	return firsts
}

// settle finishes a first attempt after the fan-out's write: it records the
// attempt now if the write did not, and gives its place in the scheduler
// back. A write that failed left the event in the outbox: the fan-out is
// made again, and so is the attempt, unrecorded here.
func (p *Pipeline) settle(f *fastAttempt) {
	if f.recorded {
		p.settled(f.job, f.result, f.began, f.from, f.done)
		return
	}
	go func() { // its place in the scheduler keeps shutdown waiting for it
		<-f.sent
		if !f.written {
			f.done(unknown)
			return
		}
		res, err := p.svc.recordAttempt(context.Background(), f.stored, &f.at, &f.ep)
		if err != nil {
			p.log.Error("webhook attempt", "deliveryId", f.job.ref.DeliveryID, "attempt", 1, "err", err.Error())
			f.done(unknown)
			return
		}
		p.settled(f.job, res, f.began, f.from, f.done)
	}()
}

// attempt makes one attempt. Attempts outlive shutdown's cancellation so
// that one under way is recorded rather than cut off and counted as failed.
func (p *Pipeline) attempt(j job) outcome {
	began, from := time.Now(), p.svc.db.Now()
	res, err := p.svc.attempt(context.Background(), j.ref, j.attempt, p.sender, p.lease)
	if err != nil {
		p.log.Error("webhook attempt", "deliveryId", j.ref.DeliveryID, "attempt", j.attempt, "err", err.Error())
		return unknown
	}
	if !res.Sent {
		return unknown
	}
	p.sched.setPace(j.ref.BrandID, j.endpoint, res.Pace)
	var out outcome
	p.settled(j, res, began, from, func(o outcome) { out = o })
	return out
}

// settled notes a recorded attempt, begun at began (from by the service's
// clock): it sets the timer for the retry, if one is due, and reports what
// the attempt told about its endpoint to done.
func (p *Pipeline) settled(j job, res AttemptResult, began, from time.Time, done func(outcome)) {
	p.log.Debug("webhook attempt", "deliveryId", j.ref.DeliveryID, "attempt", j.attempt, "status", res.Status)
	if res.RetryIn > 0 {
		p.retryAt(j.ref.DeliveryID, from.Add(res.RetryIn)) // no later than the retry is due
	}
	if time.Since(began) < quickAnswer {
		done(quick)
	} else {
		done(slow)
	}
}

// retryAt makes the pipeline read the due index, back to the retry's
// entry, when a retry of a delivery falls due at t or later.
func (p *Pipeline) retryAt(deliveryID string, t time.Time) {
	p.mu.Lock()
	if p.soonest.IsZero() || t.Before(p.soonest) {
		p.soonest = t
	}
	// Just before any entry due at t: the key of the millisecond before, at its end.
	key, shard := keys.DueQueueSK(t.Add(-time.Millisecond), "~"), keys.QueueShardOf(deliveryID)
	if p.back[shard] == "" || key < p.back[shard] {
		p.back[shard] = key
	}
	p.mu.Unlock()
	select {
	case p.retry <- struct{}{}:
	default:
	}
}

// claimEvent marks an event as queued for fan-out; it reports false when it
// already was.
func (p *Pipeline) claimEvent(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fanning[id] {
		return false
	}
	p.fanning[id] = true
	return true
}

func (p *Pipeline) releaseEvent(id string) {
	p.mu.Lock()
	delete(p.fanning, id)
	p.mu.Unlock()
}

// dueTime reads the time out of a due-queue sort key.
func dueTime(sk string) (time.Time, bool) {
	ms, _, _ := strings.Cut(sk, "#")
	n, err := strconv.ParseInt(ms, 10, 64)
	return time.UnixMilli(n), err == nil
}
