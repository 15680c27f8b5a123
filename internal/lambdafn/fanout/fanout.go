// Package fanout runs the webhook pipeline's functions that feed the
// delivery queue: the fan-out behind the table's stream, and the
// reconciler that re-drives what any stage dropped.
package fanout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"

	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/webhooks"
)

// ServeFanout runs the function behind the table's stream. It never returns.
func ServeFanout() {
	log, engine, client, url := start()
	lambda.Start(Handler(engine, client, url, log))
}

// ServeReconciler runs the scheduled function that re-drives the webhook
// work the pipeline dropped (Reconciler). It never returns.
func ServeReconciler() {
	log, engine, client, url := start()
	r := DefaultReconciler
	r.FanoutDLQ = &DLQ{Client: client, URL: lambdafn.MustEnv(log, lambdafn.EnvFanoutDLQURL)}
	if n, err := strconv.Atoi(os.Getenv(lambdafn.EnvDeliverConcurrency)); err == nil && n > 0 {
		r.Backlog = BacklogFor(n)
	}
	lambda.Start(r.Handler(engine, client, url, log))
}

// BacklogFor is the delivery queue's backlog at which the reconciler
// defers, for deliver working on concurrency batches at once: a minute of
// what they carry at about 50 deliveries a second each (docs/aws.md,
// "Capacity"). A backlog below it drains in a minute or so, three with
// slow receivers, well inside Grace: a delivery overdue by more than Grace
// is not waiting in the queue, so re-driving it repeats nothing.
func BacklogFor(concurrency int) int { return concurrency * 50 * 60 }

func start() (*slog.Logger, *webhooks.Engine, *sqsjson.Client, string) {
	log := lambdafn.Logger()
	db, settings := lambdafn.Start(log)
	engine := webhooks.New(db, webhooks.Config{Health: settings.Health(), DeliveryRetention: settings.DeliveryRetention, Writes: webhooks.Apart{}})
	return log, engine, queue.NewClient(log), lambdafn.MustEnv(log, lambdafn.EnvDeliveryQueueURL)
}

// fanoutWorkers bounds the records of a stream batch fanned out at once.
const fanoutWorkers = 10

// Handler handles a DynamoDB Streams batch: for each new event item,
// or new conversion whose event it makes, it makes the event's deliveries (webhooks.Engine.Dispatch: those of an
// event with a few go in their messages, unwritten), fanoutWorkers records
// at a time, then queues one message per pending delivery, the batch's
// messages together in batches of 10 (a message per event would cost an
// SQS request each).
// The event source mapping's filters let only those inserts through; other
// records are skipped all the same. The first record that fails (its
// fan-out, or queueing one of its deliveries) is reported (partial batch
// response), and the retry starts at it: repeating a fan-out creates
// nothing twice and queues its pending deliveries again.
func Handler(engine *webhooks.Engine, q queue.Queue, queueURL string, log *slog.Logger) func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		msgs := make([][]webhooks.DeliveryMessage, len(ev.Records))
		errs := make([]error, len(ev.Records))
		var wg sync.WaitGroup
		slots := make(chan struct{}, fanoutWorkers)
		reads := webhooks.NewReads() // each brand's subscriptions read once for the batch
		for i, rec := range ev.Records {
			dispatch, ok := dispatcher(engine, rec, reads)
			if !ok {
				continue
			}
			wg.Go(func() {
				slots <- struct{}{}
				defer func() { <-slots }()
				if msgs[i], errs[i] = dispatch(ctx); errs[i] != nil {
					log.Error("fan-out failed", "key", rec.Change.Keys["pk"].String(), "err", errs[i].Error())
				}
			})
		}
		wg.Wait()
		failed := slices.IndexFunc(errs, func(err error) bool { return err != nil })
		if failed < 0 {
			failed = len(ev.Records)
		}
		var all []webhooks.DeliveryMessage
		var owner []int // the record of each of all
		for i := range failed {
			all = append(all, msgs[i]...)
			for range msgs[i] {
				owner = append(owner, i)
			}
		}
		if n, err := queue.Send(ctx, q, queueURL, messages(all)); err != nil {
			log.Error("queueing deliveries failed", "deliveryId", all[n].DeliveryID, "err", err.Error())
			failed = owner[n]
		}
		var resp events.DynamoDBEventResponse
		if failed < len(ev.Records) {
			resp.BatchItemFailures = []events.DynamoDBBatchItemFailure{{ItemIdentifier: ev.Records[failed].Change.SequenceNumber}}
		}
		return resp, nil
	}
}

// dispatcher returns the fan-out of a stream record that inserts an event
// item (webhooks.Engine.Dispatch) but one the fan-out made, or a
// conversion whose event the fan-out makes
// (webhooks.Engine.DispatchConversion, from the record's new image).
func dispatcher(engine *webhooks.Engine, rec events.DynamoDBEventRecord, reads *webhooks.Reads) (func(context.Context) ([]webhooks.DeliveryMessage, error), bool) {
	if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
		return nil, false
	}
	pk, ok := rec.Change.Keys["pk"]
	if !ok || pk.DataType() != events.DataTypeString {
		return nil, false
	}
	_, made := rec.Change.NewImage["outbox"] // an event the fan-out made
	if eventID, ok := strings.CutPrefix(pk.String(), "EVT#"); ok && !made {
		return func(ctx context.Context) ([]webhooks.DeliveryMessage, error) {
			return engine.Dispatch(ctx, eventID, reads)
		}, true
	}
	if v, ok := rec.Change.NewImage["fanout"]; !ok || v.DataType() != events.DataTypeString || v.String() != "stream" {
		return nil, false
	}
	return func(ctx context.Context) ([]webhooks.DeliveryMessage, error) {
		item, err := lambdafn.StreamItem(rec.Change.NewImage)
		if err != nil {
			return nil, fmt.Errorf("stream record %s: %w", rec.Change.SequenceNumber, err)
		}
		return engine.DispatchConversion(ctx, item, reads)
	}, true
}

// ReconcileQueue is the part of the SQS client the reconciler uses: it
// queues, and it looks at the delivery queue's backlog.
type ReconcileQueue interface {
	queue.Queue
	// ApproximateNumberOfMessages is the queue's attribute of that name.
	ApproximateNumberOfMessages(ctx context.Context, queueURL string) (int, error)
}

// DLQ is a dead-letter queue the reconciler takes messages from: the part
// of the SQS client it uses (*sqsjson.Client), and the queue's URL.
type DLQ struct {
	Client interface {
		queue.Queue
		Receive(ctx context.Context, queueURL string, n int, visibility time.Duration) ([]sqsjson.Received, error)
		Delete(ctx context.Context, queueURL, receiptHandle string) error
	}
	URL string
}

// Reconciler re-drives the webhook work the AWS transport dropped. Every
// stage may lose work for good: a stream batch that exhausts its retries
// leaves only metadata in FanoutDLQ, and the records expire with the
// stream; events written while the event source mapping is recreated are
// never read (it starts at LATEST); a delivery message received 5 times
// goes to DeliveryDLQ, or expires with the queue's retention; an execution
// can end without deciding its delivery. The table still knows most of it:
// events whose deliveries are not all written keep their outbox key (those
// their messages carry are written by attempt 1), pending deliveries their
// due key (gsi3). A run fans out again the events that have been in the
// outbox longer than Grace, and queues again the pending deliveries whose next
// attempt is overdue by more than Grace; both steps are idempotent, so a
// false alarm costs a repeated step, not a repeated request. A new
// conversion's event is made by the fan-out from the stream and is in no
// outbox: a batch given up leaves its records' arrival times in FanoutDLQ,
// and a run dispatches again the conversions made then (streamBatches).
type Reconciler struct {
	// Grace is how long work may wait before it counts as dropped: well
	// above what the stream, the queue and the state machine take when
	// they work, retries included.
	Grace time.Duration
	// Page is how many events and deliveries (of each) a run reads at a
	// time, oldest first; it reads pages until it has read them all or
	// its time is up (Margin), and the next run takes the rest.
	Page int
	// Backlog is how many visible messages the delivery queue may hold for
	// the run to re-drive events and deliveries: a longer queue means
	// deliver is behind, and overdue deliveries are most likely in it
	// already, as are the messages of outboxed events whose deliveries
	// attempt 1 writes.
	Backlog int
	// Workers bounds the fan-outs, and the SQS requests, a run makes at
	// once.
	Workers int
	// Release bounds the parked deliveries a run releases (queues) when
	// their endpoint's circuit closed (webhooks.Engine.Released): the refs
	// it holds at once.
	Release int
	// Margin is the part of the run's time (its context's deadline) kept
	// for finishing what is under way: the run starts no page, no fan-out
	// and no endpoint's release after the deadline less Margin, or less a
	// quarter of the time left when the run starts with less than 4
	// Margins. The release takes at most half of the rest.
	Margin time.Duration
	// Metrics receives each run's deferral and skips (ReconcilerDeferralsAlarm).
	Metrics *emf.Metrics
	// FanoutDLQ is the fan-out's on-failure destination, whose messages a
	// run takes (streamBatches); nil: none.
	FanoutDLQ *DLQ
}

// BatchMargin widens a failed stream batch's arrival span when the
// reconciler looks for its conversions by id: an id is made before its
// request reads the offer and the partner and writes the marker and the
// conversion, which the stream then carries.
const BatchMargin = time.Minute

// batchVisibility hides a FanoutDLQ message a run took from other runs
// for as long as a run lasts: one it leaves (a dispatch failed, its time
// was up) is taken again by the next.
const batchVisibility = 4 * time.Minute

// DefaultReconciler is the deployed reconciler's configuration (docs/aws.md,
// "The reconciler", for the figures).
var DefaultReconciler = Reconciler{Grace: 10 * time.Minute, Page: 500, Backlog: BacklogFor(50), Workers: 32, Release: 100000,
	Margin: 15 * time.Second, Metrics: emf.New(os.Stdout)}

// ReconcilerResult is what a run did.
type ReconcilerResult struct {
	Events      int  `json:"events"`      // events fanned out again
	Batches     int  `json:"batches"`     // failed stream batches taken from FanoutDLQ
	Conversions int  `json:"conversions"` // conversions dispatched again for them
	Deliveries  int  `json:"deliveries"`  // deliveries queued again
	Released    int  `json:"released"`    // parked deliveries queued: their endpoint's circuit closed, or the next probe
	Failed      int  `json:"failed"`      // parked deliveries failed: they waited out a probe's failed schedule
	Circuits    int  `json:"circuits"`    // endpoints whose wait lists were read: open circuits, or recently closed
	Backlog     int  `json:"backlog"`     // visible messages in the delivery queue
	Deferred    bool `json:"deferred"`    // events and deliveries were left for a later run: the queue has a backlog
	Skipped     int  `json:"skipped"`     // items skipped, each until its backoff ends (webhooks.Skipped)
	Unfinished  int  `json:"unfinished"`  // endpoints whose release is left for the next run: out of time or over Release
	OutOfTime   bool `json:"outOfTime"`   // events or deliveries found were left for the next run: the run's time was up
}

// Handler returns the scheduled handler. A run that could not re-drive
// everything it found returns an error, after doing the rest, so that the
// function's Errors metric (ReconcilerFunctionErrorsAlarm) reports it. An item it
// cannot read or re-drive is logged and skipped with a backoff
// (webhooks.Skipped): one poison item neither blocks the rest nor fails
// every run, only those that try it again. A run that leaves work for a
// later one (a deferral to the queue's backlog, its time up, Release
// reached) logs it at WARN and counts it (ReconcilerDeferralsAlarm).
func (r Reconciler) Handler(engine *webhooks.Engine, q ReconcileQueue, queueURL string, log *slog.Logger) func(context.Context, events.EventBridgeEvent) (ReconcilerResult, error) {
	return func(ctx context.Context, ev events.EventBridgeEvent) (ReconcilerResult, error) {
		var res ReconcilerResult
		var errs []error
		skipped := func(all []webhooks.Skipped) {
			for _, s := range all {
				log.Warn("reconciler skipped an item until its backoff ends", "pk", s.Key.PK, "sk", s.Key.SK, "err", s.Err.Error())
			}
			res.Skipped += len(all)
		}
		defer func() {
			r.Metrics.Reconciled(lambdacontext.FunctionName, res.Deferred || res.OutOfTime || res.Unfinished > 0, res.Skipped)
		}()
		stop := r.stopAt(ctx)
		var err error
		res.Backlog, err = backlog(ctx, q, queueURL)
		switch {
		case err != nil:
			// Events only wait for a backlog that is known to be there: the
			// deliveries carried in a lost message have nothing else that
			// finds them. Deliveries wait for a run that reads it.
			errs = append(errs, err)
			errs = append(errs, r.streamBatches(ctx, engine, q, queueURL, halfway(stop), &res, log)...)
			errs = append(errs, r.sweep(ctx, engine, q, queueURL, stop, false, &res, skipped)...)
		case res.Backlog >= r.Backlog:
			res.Deferred = true
			log.Warn("the delivery queue has a backlog: overdue events and deliveries and parked deliveries are left for a later run", "backlog", res.Backlog)
		default:
			// The release first, with at most half the time: a sweep with
			// more than a run can take does not starve it.
			if err := r.release(ctx, engine, q, queueURL, halfway(stop), &res, skipped); err != nil {
				errs = append(errs, fmt.Errorf("release parked deliveries: %w", err))
			}
			// Then the failed stream batches, with at most half of the rest:
			// a span of many conversions does not starve the sweep.
			errs = append(errs, r.streamBatches(ctx, engine, q, queueURL, halfway(stop), &res, log)...)
			errs = append(errs, r.sweep(ctx, engine, q, queueURL, stop, true, &res, skipped)...)
		}
		if res.OutOfTime || res.Unfinished > 0 {
			log.Warn("the run's time was up: what it found and did not re-drive is left for the next run", "outOfTime", res.OutOfTime, "unfinished", res.Unfinished)
		}
		if res.Skipped > 0 {
			errs = append(errs, fmt.Errorf("%d items skipped until their backoff ends", res.Skipped))
		}
		log.Info("reconciled", "events", res.Events, "batches", res.Batches, "conversions", res.Conversions, "deliveries", res.Deliveries, "released", res.Released, "failed", res.Failed, "circuits", res.Circuits,
			"backlog", res.Backlog, "deferred", res.Deferred, "skipped", res.Skipped, "unfinished", res.Unfinished, "outOfTime", res.OutOfTime)
		return res, errors.Join(errs...)
	}
}

// halfway is half the time from now to stop.
func halfway(stop time.Time) time.Time { return time.Now().Add(time.Until(stop) / 2) }

// stopAt is when a run starts nothing more (Margin).
func (r Reconciler) stopAt(ctx context.Context) time.Time {
	if stop := lambdafn.StopAt(ctx, r.Margin); !stop.IsZero() {
		return stop
	}
	return time.Now().Add(100 * 365 * 24 * time.Hour)
}

// sweep re-drives what Engine.Sweep finds, a page at a time, until it has
// read all or stop: the events fanned out again, and, when deliveries, the
// overdue deliveries queued again. It returns the errors that stopped it.
func (r Reconciler) sweep(ctx context.Context, engine *webhooks.Engine, q queue.Queue, queueURL string, stop time.Time, deliveries bool, res *ReconcilerResult, skipped func([]webhooks.Skipped)) []error {
	sw := engine.Sweep(engine.Now().Add(-r.Grace), r.Page)
	for !sw.Done() {
		if time.Now().After(stop) {
			res.OutOfTime = true
			return nil
		}
		page, err := sw.Next(ctx, r.Page)
		skipped(page.Skipped)
		if err != nil {
			return []error{err}
		}
		done, failed, left := r.fanOutAll(ctx, engine, q, queueURL, page.Events, stop)
		res.Events += done
		res.OutOfTime = res.OutOfTime || left
		skipped(failed)
		if !deliveries {
			continue
		}
		n, err := r.send(ctx, q, queueURL, refMessages(page.Deliveries))
		res.Deliveries += n
		if err != nil {
			return []error{err}
		}
	}
	return nil
}

// release queues the parked deliveries whose endpoint's circuit closed
// (webhooks.Engine.Released), the release bounded by until; what it left
// is released by the next run.
func (r Reconciler) release(ctx context.Context, engine *webhooks.Engine, q queue.Queue, queueURL string, until time.Time, res *ReconcilerResult, skipped func([]webhooks.Skipped)) error {
	relCtx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	rel, err := engine.Released(relCtx, r.Release)
	res.Failed, res.Circuits, res.Unfinished = rel.Failed, rel.Watched, rel.Unfinished
	skipped(rel.Skipped)
	if err != nil {
		return err
	}
	res.Released, err = r.send(ctx, q, queueURL, refMessages(rel.Refs))
	return err
}

// fanOutAll fans out events, Workers at a time, then queues their messages
// together (dispatchAll); it starts no fan-out after stop. It returns how
// many it fanned out, those that failed (their fan-out or the queueing of
// one of their messages), skipped (webhooks.Engine.SkipEvent), and whether
// it left some for stop.
func (r Reconciler) fanOutAll(ctx context.Context, engine *webhooks.Engine, q queue.Queue, queueURL string, evts []string, stop time.Time) (int, []webhooks.Skipped, bool) {
	reads := webhooks.NewReads()
	errs, left := r.dispatchAll(ctx, q, queueURL, len(evts), stop, func(i int) ([]webhooks.DeliveryMessage, error) {
		return engine.Dispatch(ctx, evts[i], reads)
	})
	var failed []webhooks.Skipped
	var mu sync.Mutex
	done := 0
	each(len(evts), r.Workers, func(i int) {
		switch {
		case errs[i] == nil:
			mu.Lock()
			done++
			mu.Unlock()
		case errs[i] != errLeft:
			s := engine.SkipEvent(ctx, evts[i], errs[i])
			mu.Lock()
			failed = append(failed, s)
			mu.Unlock()
		}
	})
	return done, failed, left
}

// dispatchAll calls dispatch for 0 to n-1, Workers at a time, then queues
// their messages together (sendChunks); it starts no dispatch after stop.
// It returns each one's error (errLeft: left for stop; else its dispatch's,
// or its messages' queueing's), and whether it left some.
func (r Reconciler) dispatchAll(ctx context.Context, q queue.Queue, queueURL string, n int, stop time.Time, dispatch func(i int) ([]webhooks.DeliveryMessage, error)) ([]error, bool) {
	msgs := make([][]webhooks.DeliveryMessage, n)
	errs := make([]error, n)
	var left atomic.Bool
	each(n, r.Workers, func(i int) {
		if time.Now().After(stop) {
			left.Store(true)
			errs[i] = errLeft
			return
		}
		msgs[i], errs[i] = dispatch(i)
	})
	var all []queue.Message
	var owner []int // the dispatch of each of all
	for i := range n {
		for _, m := range msgs[i] {
			all, owner = append(all, m), append(owner, i)
		}
	}
	chunkErrs := r.sendChunks(ctx, q, queueURL, all)
	for c, err := range chunkErrs {
		for k := c * sqsjson.MaxBatch; err != nil && k < min((c+1)*sqsjson.MaxBatch, len(all)); k++ {
			if errs[owner[k]] == nil {
				errs[owner[k]] = err
			}
		}
	}
	return errs, left.Load()
}

// streamBatches takes the fan-out's failed stream batches from FanoutDLQ,
// until it is empty or stop. For each it dispatches again, as the fan-out
// would have, the conversions made within its records' arrival span
// (widened by BatchMargin, across brands: webhooks.Engine.StreamConversions),
// Workers at a time, and queues their messages; the events the batch held
// are in the outbox, for the sweep. It deletes a batch's message once all of
// its conversions are dispatched and queued. One whose time ran out is
// queued again with where it got to (failedBatch.Resume) for the next run;
// one it could not read or whose dispatch failed is left
// (batchVisibility), and a later run dispatches it again, repeating
// nothing already done. It returns the errors.
func (r Reconciler) streamBatches(ctx context.Context, engine *webhooks.Engine, q queue.Queue, queueURL string, stop time.Time, res *ReconcilerResult, log *slog.Logger) []error {
	if r.FanoutDLQ == nil {
		return nil
	}
	var errs []error
	for time.Now().Before(stop) {
		msgs, err := r.FanoutDLQ.Client.Receive(ctx, r.FanoutDLQ.URL, sqsjson.MaxBatch, batchVisibility)
		if err != nil {
			return append(errs, fmt.Errorf("take failed stream batches: %w", err))
		}
		if len(msgs) == 0 {
			return errs
		}
		for _, m := range msgs {
			b, err := readBatch(m.Body)
			if err != nil {
				// It never will be read: deleted, and this run fails once
				// (ReconcilerFunctionErrorsAlarm) with the message logged.
				log.Error("an unreadable failed stream batch is deleted", "batch", m.Body, "err", err.Error())
				errs = append(errs, fmt.Errorf("unreadable failed stream batch: %w", errors.Join(err, r.FanoutDLQ.Client.Delete(ctx, r.FanoutDLQ.URL, m.ReceiptHandle))))
				continue
			}
			err = r.streamBatch(ctx, engine, q, queueURL, &b, stop, res)
			if errors.Is(err, errLeft) {
				res.OutOfTime = true
				err = r.FanoutDLQ.Client.SendBatch(ctx, r.FanoutDLQ.URL, sqsjson.Messages(b.body()))
			}
			if err == nil {
				err = r.FanoutDLQ.Client.Delete(ctx, r.FanoutDLQ.URL, m.ReceiptHandle)
			}
			if err != nil {
				log.Warn("a failed stream batch is left for a later run", "batch", m.Body, "err", err.Error())
				errs = append(errs, fmt.Errorf("failed stream batch: %w", err))
				continue
			}
			if res.OutOfTime {
				return errs // the others received come back after batchVisibility
			}
			res.Batches++
		}
	}
	res.OutOfTime = true
	return errs
}

// streamBatch dispatches again the conversions of b (streamBatches), and
// moves b.Resume past each page it dispatched; errLeft when stop came
// first.
func (r Reconciler) streamBatch(ctx context.Context, engine *webhooks.Engine, q queue.Queue, queueURL string, b *failedBatch, stop time.Time, res *ReconcilerResult) error {
	reads := webhooks.NewReads()
	var failed error
	err := engine.StreamConversions(ctx, b.First.Add(-BatchMargin), b.Last.Add(BatchMargin), b.Resume, func(items []store.Item, next webhooks.StreamPosition) bool {
		if time.Now().After(stop) {
			failed = errLeft
			return false
		}
		errs, _ := r.dispatchAll(ctx, q, queueURL, len(items), stop, func(i int) ([]webhooks.DeliveryMessage, error) {
			return engine.DispatchConversion(ctx, items[i], reads)
		})
		for i, err := range errs {
			switch {
			case err == nil:
				res.Conversions++
			case failed == nil:
				failed = fmt.Errorf("conversion %s: %w", items[i].SK, err)
			}
		}
		if failed == nil {
			b.Resume = next
		}
		return failed == nil
	})
	return errors.Join(err, failed)
}

// failedBatch is a FanoutDLQ message: Lambda's on-failure record of a
// stream batch, whose DDBStreamBatchInfo says when its first and last
// records reached the stream, and, once a run ran out of time on it,
// where that run got to.
type failedBatch struct {
	First, Last time.Time
	Resume      webhooks.StreamPosition
	fields      map[string]json.RawMessage // the message's, kept as they are
}

// resumeField is the field of a FanoutDLQ message the reconciler adds.
const resumeField = "tallyResume"

// readBatch reads a FanoutDLQ message.
func readBatch(body string) (failedBatch, error) {
	var b failedBatch
	var info struct {
		First time.Time `json:"approximateArrivalOfFirstRecord"`
		Last  time.Time `json:"approximateArrivalOfLastRecord"`
	}
	if err := json.Unmarshal([]byte(body), &b.fields); err != nil {
		return b, fmt.Errorf("read the message: %w", err)
	}
	if err := json.Unmarshal(b.fields["DDBStreamBatchInfo"], &info); err != nil || info.First.IsZero() || info.Last.Before(info.First) {
		return b, fmt.Errorf("the message gives no arrival times (DDBStreamBatchInfo.approximateArrivalOfFirstRecord, …LastRecord)")
	}
	b.First, b.Last = info.First, info.Last
	if raw, ok := b.fields[resumeField]; ok {
		if err := json.Unmarshal(raw, &b.Resume); err != nil {
			return b, fmt.Errorf("read the message's %s: %w", resumeField, err)
		}
	}
	return b, nil
}

// body is the message of b, with where it got to.
func (b failedBatch) body() string {
	b.fields[resumeField] = records.MustJSON(b.Resume)
	out, _ := json.Marshal(b.fields) // raw JSON fields always marshal
	return string(out)
}

// errLeft marks an event a run had no time to fan out.
var errLeft = errors.New("left for the next run")

// send queues msgs (sendChunks) and returns how many it queued, and the
// first error.
func (r Reconciler) send(ctx context.Context, q queue.Queue, queueURL string, msgs []queue.Message) (int, error) {
	n := len(msgs)
	var errs []error
	for c, err := range r.sendChunks(ctx, q, queueURL, msgs) {
		if err != nil {
			n -= min((c+1)*sqsjson.MaxBatch, len(msgs)) - c*sqsjson.MaxBatch
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return n, errs[0]
	}
	return n, nil
}

// sendChunks queues msgs in SendMessageBatch calls of sqsjson.MaxBatch,
// Workers at a time, and returns each call's error.
func (r Reconciler) sendChunks(ctx context.Context, q queue.Queue, queueURL string, msgs []queue.Message) []error {
	chunks := (len(msgs) + sqsjson.MaxBatch - 1) / sqsjson.MaxBatch
	errs := make([]error, chunks)
	each(chunks, r.Workers, func(c int) {
		_, errs[c] = queue.Send(ctx, q, queueURL, msgs[c*sqsjson.MaxBatch:min((c+1)*sqsjson.MaxBatch, len(msgs))])
	})
	return errs
}

// each calls fn for 0 to n-1, workers at a time.
func each(n, workers int, fn func(i int)) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(max(workers, 1), n) {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// backlog is the number of visible messages in the queue.
func backlog(ctx context.Context, q ReconcileQueue, queueURL string) (int, error) {
	n, err := q.ApproximateNumberOfMessages(ctx, queueURL)
	if err != nil {
		return 0, fmt.Errorf("delivery queue backlog: %w", err)
	}
	return n, nil
}

// messages are the queue's messages of msgs.
func messages(msgs []webhooks.DeliveryMessage) []queue.Message {
	out := make([]queue.Message, len(msgs))
	for i, m := range msgs {
		out[i] = m
	}
	return out
}

// refMessages are the queue's messages of refs.
func refMessages(refs []endpoints.DeliveryRef) []queue.Message {
	out := make([]queue.Message, len(refs))
	for i, ref := range refs {
		out[i] = ref
	}
	return out
}
