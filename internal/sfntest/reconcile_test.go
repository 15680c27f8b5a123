package sfntest_test

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/deliver"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/webhooks"
)

// These tests drop webhook work on purpose, each the way AWS can drop it,
// and check that the reconciler re-drives it from what the table keeps:
// every event delivered, each once, and nothing left pending. The table is
// DynamoDB Local, the queues are fauxqs, the retry workflow runs in
// local-sfn behind sfntest.Server. Stand-ins: the event source mappings
// (the tests hand stream records to the fan-out and queue messages to the
// deliver function, deleting the ones it did not report, as Lambda does),
// and a message's expiry (fauxqs never expires one: the test deletes it,
// which loses it the same way).

// pipeline is a fixture with the delivery queue and its dead-letter queue,
// and one subscription to a receiver.
type pipeline struct {
	*fixture
	sqs        *sqs.Client     // the SDK's, for what the event source mapping and the test do
	send       *sqsjson.Client // the functions' own
	queue, dlq sqstest.Queue
	fanoutDLQ  sqstest.Queue // the fan-out's on-failure destination
	rcv        *receiver
}

// newPipeline makes the queues with a visibility timeout of visibility (the
// deployed one is 180 s) and the deployed redrive (5 receives), and a
// subscription to webhook.test at a receiver answering status(n).
func newPipeline(t *testing.T, visibility time.Duration, status func(n int) int) *pipeline {
	t.Helper()
	return newPipelineWaiting(t, waitTime, visibility, status)
}

// newPipelineWaiting is newPipeline with the retry workflow's waits wait.
func newPipelineWaiting(t *testing.T, wait, visibility time.Duration, status func(n int) int) *pipeline {
	t.Helper()
	p := &pipeline{fixture: newFixtureWaiting(t, wait), sqs: sqstest.NewClient(sqstest.Endpoint(t)), send: sqstest.NewSender(sqstest.Endpoint(t))}
	p.queue, p.dlq = sqstest.NewQueueWithDLQ(t, p.sqs, visibility, 5)
	p.fanoutDLQ = sqstest.NewQueue(t, p.sqs, nil)
	p.later = deliver.Later(p.send, p.queue.URL)
	p.rcv = newReceiver(t, status)
	p.subscribe(t, p.rcv.URL, secret, tally.EventConversionCreated)
	return p
}

func ok200(int) int { return 200 }

// event emits a webhook.test to the subscription and returns its id.
func (p *pipeline) event(t *testing.T) string {
	t.Helper()
	subs, _, err := p.svc.Endpoints.Subscriptions(t.Context(), p.brand.ID, records.ListParams{Limit: 1})
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	evt, err := p.svc.Endpoints.SendTestEvent(t.Context(), p.brand.ID, subs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	return evt.ID
}

// streamBatch is what the fan-out's event source mapping hands it: the
// table's stream, filtered as deployed.
func (p *pipeline) streamBatch(t *testing.T) []events.DynamoDBEventRecord {
	t.Helper()
	patterns := filterPatterns(t, "FanoutFunction")
	var batch []events.DynamoDBEventRecord
	for _, rec := range p.readStream(t) {
		if matchesAny(t, patterns, rec) {
			batch = append(batch, rec)
		}
	}
	return batch
}

// fanout runs the fan-out function on a batch, sending with client.
func (p *pipeline) fanout(t *testing.T, client queue.Queue, batch []events.DynamoDBEventRecord) events.DynamoDBEventResponse {
	t.Helper()
	h := fanout.Handler(p.function().Webhooks, client, p.queue.URL, p.log)
	out, err := h(lambdaContext(t.Context(), "fanout"), roundTrip(t, events.DynamoDBEvent{Records: batch}))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// deliverAll runs the deliver function on the queue's messages, a batch at
// a time, until the queue is empty; it returns how many it took.
func (p *pipeline) deliverAll(t *testing.T) int {
	t.Helper()
	n := 0
	for {
		msgs := sqstest.Receive(t, p.sqs, p.queue, 10, 0)
		if len(msgs) == 0 {
			return n
		}
		p.deliver(t, msgs...) // fails the test on a batch item failure
		sqstest.Finish(t, p.sqs, p.queue, msgs, events.SQSEventResponse{})
		n += len(msgs)
	}
}

// reconcile runs the reconciler as it would run grace and a minute after
// now.
func (p *pipeline) reconcile(t *testing.T) fanout.ReconcilerResult {
	t.Helper()
	return p.reconcileAfter(t, fanout.DefaultReconciler.Grace+time.Minute)
}

// reconcileAfter runs the reconciler as it would run d after now.
func (p *pipeline) reconcileAfter(t *testing.T, d time.Duration) fanout.ReconcilerResult {
	t.Helper()
	later := func() time.Time { return time.Now().Add(d) }
	svc := servicetest.New(dynamo.New(p.client, p.table), service.OnAWS(), service.WithClock(later))
	r := fanout.DefaultReconciler
	r.FanoutDLQ = &fanout.DLQ{Client: p.send, URL: p.fanoutDLQ.URL}
	h := r.Handler(svc.Webhooks, p.send, p.queue.URL, p.log)
	res, err := h(lambdaContext(t.Context(), "reconciler"), events.EventBridgeEvent{})
	if err != nil {
		t.Fatalf("reconciler: %+v, %v", res, err)
	}
	return res
}

// recovered checks the end state: every event of the brand has its one
// delivery, succeeded after one request, and a further run of the
// reconciler finds nothing.
func (p *pipeline) recovered(t *testing.T, eventIDs ...string) {
	t.Helper()
	for _, id := range eventIDs {
		ds, _, err := p.svc.Deliveries.Deliveries(t.Context(), p.brand.ID, endpoints.DeliveryFilter{EventID: id}, records.ListParams{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].Status != tally.DeliverySucceeded || len(ds[0].Attempts) != 1 {
			t.Errorf("event %s: deliveries %+v, want one, succeeded at its first attempt", id, ds)
		}
	}
	var got []string
	for _, r := range p.rcv.requests() {
		var env tally.Event
		json.Unmarshal(r.body, &env)
		got = append(got, env.ID)
	}
	slices.Sort(got)
	if want := slices.Sorted(slices.Values(eventIDs)); !slices.Equal(got, want) {
		t.Errorf("the receiver got events %v, want each of %v once", got, want)
	}
	if res := p.reconcile(t); res.Events != 0 || res.Deliveries != 0 || res.Conversions != 0 || res.Batches != 0 {
		t.Errorf("a further run re-drove %+v, want nothing", res)
	}
	if left := sqstest.Receive(t, p.sqs, p.queue, 10, 0); len(left) != 0 {
		t.Errorf("%d messages left in the queue", len(left))
	}
}

// unwritten checks that the event's delivery is not written: its message,
// which carried it, was dropped (the event is still in the outbox).
func (p *pipeline) unwritten(t *testing.T, eventID string) {
	t.Helper()
	ds, _, err := p.svc.Deliveries.Deliveries(t.Context(), p.brand.ID, endpoints.DeliveryFilter{EventID: eventID}, records.ListParams{Limit: 10})
	if err != nil || len(ds) != 0 {
		t.Fatalf("after the drop: %+v, %v; want no delivery written", ds, err)
	}
}

// A delivery message the deliver function failed 5 times goes to
// DeliveryDLQ (here it is received 5 times and never deleted).
func TestReconcileDeadLetteredMessage(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, time.Second, ok200)
	evt := p.event(t)
	if out := p.fanout(t, p.send, p.streamBatch(t)); len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %+v", out)
	}
	for range 5 {
		if msgs := sqstest.Receive(t, p.sqs, p.queue, 10, 3*time.Second); len(msgs) != 1 {
			t.Fatalf("received %d messages, want the delivery's", len(msgs))
		}
	}
	if msgs := sqstest.Receive(t, p.sqs, p.queue, 10, 3*time.Second); len(msgs) != 0 {
		t.Fatal("the message was not moved to the dead-letter queue")
	}
	if dead := sqstest.Drain(t, p.sqs, p.dlq); len(dead) != 1 {
		t.Fatalf("the dead-letter queue has %d messages, want 1", len(dead))
	}
	p.unwritten(t, evt)

	if res := p.reconcile(t); res.Deliveries != 0 || res.Events != 1 {
		t.Fatalf("reconciler %+v, want the event fanned out again", res)
	}
	if n := p.deliverAll(t); n != 1 {
		t.Errorf("deliver took %d messages, want 1", n)
	}
	p.recovered(t, evt)
}

// A delivery message expires (the queue keeps messages 4 days): fauxqs
// never expires one, so the test takes it off the queue unprocessed.
func TestReconcileExpiredMessage(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, ok200)
	evt := p.event(t)
	p.fanout(t, p.send, p.streamBatch(t))
	if lost := sqstest.Drain(t, p.sqs, p.queue); len(lost) != 1 {
		t.Fatalf("%d messages, want the delivery's", len(lost))
	}
	p.unwritten(t, evt)

	if res := p.reconcile(t); res.Events != 1 {
		t.Fatalf("reconciler %+v, want the event fanned out again", res)
	}
	p.deliverAll(t)
	p.recovered(t, evt)
}

// A stream batch exhausts its retries: the fan-out cannot queue (SQS
// refuses), reports the first record, and Lambda gives up on the batch,
// sending only its metadata to FanoutDLQ; the records expire with the
// stream. Both events were fanned out (the records of a batch are fanned
// out together, then their deliveries queued), but each one's only
// delivery goes in its message, unwritten: both events are still in the
// outbox. (Events never fanned out: TestReconcileEventsTheMappingMissed.)
func TestReconcileStreamBatchLost(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, ok200)
	a, b := p.event(t), p.event(t)
	batch := p.streamBatch(t)
	if len(batch) != 2 {
		t.Fatalf("the stream has %d event inserts, want 2", len(batch))
	}
	down := sqstest.NewSender("http://127.0.0.1:1") // nothing listens: every call fails
	for range 3 {                                   // the mapping's retries (10 deployed) all fail alike
		out := p.fanout(t, down, batch)
		if len(out.BatchItemFailures) != 1 || out.BatchItemFailures[0].ItemIdentifier != batch[0].Change.SequenceNumber {
			t.Fatalf("fanout with the queue down: %+v, want the first record reported", out)
		}
	}
	p.gaveUp(t, batch)
	p.unwritten(t, a)
	p.unwritten(t, b)

	p.redrive(t, 2)
	p.recovered(t, a, b)
}

// gaveUp sends FanoutDLQ what Lambda sends its on-failure destination when
// it gives up on a stream batch: the batch's metadata (its shard's
// sequence numbers and its records' arrival times), not its records.
func (p *pipeline) gaveUp(t *testing.T, batch []events.DynamoDBEventRecord) {
	t.Helper()
	p.gaveUpResumed(t, batch, webhooks.StreamPosition{})
}

// gaveUpResumed is gaveUp with the message as a reconciler run that ran
// out of time queues it again: with where it got to.
func (p *pipeline) gaveUpResumed(t *testing.T, batch []events.DynamoDBEventRecord, at webhooks.StreamPosition) {
	t.Helper()
	first, last := batch[0].Change.ApproximateCreationDateTime.Time, batch[0].Change.ApproximateCreationDateTime.Time
	for _, rec := range batch {
		if at := rec.Change.ApproximateCreationDateTime.Time; at.Before(first) {
			first = at
		} else if at.After(last) {
			last = at
		}
	}
	msg := map[string]any{"requestContext": map[string]any{"condition": "RetryAttemptsExhausted"},
		"DDBStreamBatchInfo": map[string]any{
			"shardId": "shardId-00000001", "startSequenceNumber": batch[0].Change.SequenceNumber, "endSequenceNumber": batch[len(batch)-1].Change.SequenceNumber,
			"approximateArrivalOfFirstRecord": first.UTC().Format(time.RFC3339Nano), "approximateArrivalOfLastRecord": last.UTC().Format(time.RFC3339Nano),
			"batchSize": len(batch), "streamArn": batch[0].EventSourceArn,
		}}
	if at != (webhooks.StreamPosition{}) {
		msg["tallyResume"] = at
	}
	meta, _ := json.Marshal(msg)
	if _, err := p.sqs.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &p.fanoutDLQ.URL, MessageBody: ptr(string(meta))}); err != nil {
		t.Fatal(err)
	}
}

// Events written while the fan-out's event source mapping is recreated:
// it starts at LATEST, after them, and never reads them.
func TestReconcileEventsTheMappingMissed(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, ok200)
	evts := []string{p.event(t), p.event(t), p.event(t)}
	if res := p.reconcile(t); res.Events != 3 || res.Deliveries != 0 {
		t.Fatalf("reconciler %+v, want the three events fanned out", res)
	}
	p.deliverAll(t)
	p.recovered(t, evts...)
}

// The deliver function wrote the delivery with attempt 1's outcome and
// stopped before taking the event out of the outbox (the test puts the
// outbox key back): the reconciler fans the event out again, and deliver,
// finding the delivery written, sends nothing and finishes the event.
func TestReconcileDeliverStoppedBeforeTheOutbox(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, ok200)
	evt := p.event(t)
	outboxed, err := dynamo.New(p.client, p.table).Get(t.Context(), store.Key{PK: "EVT#" + evt, SK: "#EVT"})
	if err != nil || outboxed.GSI3 == (store.IndexKey{}) {
		t.Fatalf("event item %+v, %v; want it in the outbox", outboxed, err)
	}
	p.deliverStoppedBeforeTheOutbox(t, outboxed)
	p.recovered(t, evt)
}

// deliverStoppedBeforeTheOutbox fans out the stream and delivers its one
// message, then writes outboxed back (as it was before deliver took the
// event out of the outbox): the reconciler fans the event out again, and
// deliver takes its one message.
func (p *pipeline) deliverStoppedBeforeTheOutbox(t *testing.T, outboxed store.Item) {
	t.Helper()
	p.fanout(t, p.send, p.streamBatch(t))
	if n := p.deliverAll(t); n != 1 {
		t.Fatalf("deliver took %d messages, want 1", n)
	}
	if err := dynamo.New(p.client, p.table).Transact(t.Context(), store.Put(outboxed)); err != nil {
		t.Fatal(err)
	}
	p.redrive(t, 1)
}

// redrive runs the reconciler, which must fan out n events again and queue
// no delivery, then the deliver function, which must take their n messages.
func (p *pipeline) redrive(t *testing.T, n int) {
	t.Helper()
	if res := p.reconcile(t); res.Events != n || res.Deliveries != 0 {
		t.Fatalf("reconciler %+v, want %d events fanned out again", res, n)
	}
	if got := p.deliverAll(t); got != n {
		t.Errorf("deliver took %d messages, want %d", got, n)
	}
}

// Two runs at once (the deployed function has reserved concurrency 1, so
// this is a deploy going wrong, or a manual invocation): each dropped event
// gets its one delivery, and each delivery, whatever the messages, is
// delivered once when deliver takes them one batch at a time.
func TestReconcileRunsRacing(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, ok200)
	evts := []string{p.event(t), p.event(t), p.event(t), p.event(t)}
	var wg sync.WaitGroup
	results := make([]fanout.ReconcilerResult, 2)
	for i := range results {
		wg.Go(func() { results[i] = p.reconcile(t) })
	}
	wg.Wait()
	if n := results[0].Events + results[1].Events; n < len(evts) {
		t.Errorf("the runs fanned out %d events, want at least %d", n, len(evts))
	}
	p.deliverAll(t)
	p.recovered(t, evts...)
}

// An execution ends without deciding its delivery: attempt 3's task and the
// abandon task keep failing (standing in for the table or Lambda failing).
// The delivery is pending, its next attempt overdue; the reconciler queues
// it, and the deliver function restarts the schedule at attempt 3.
func TestReconcileEndedExecution(t *testing.T) {
	t.Parallel()
	p := newPipeline(t, 180*time.Second, func(n int) int {
		if n < 3 {
			return 503
		}
		return 200
	})
	p.failOnPurpose(t, "3", "abandon")
	evt := p.event(t)
	p.fanout(t, p.send, p.streamBatch(t))
	p.deliverAll(t)
	names := p.workflow.Names()
	if len(names) != 1 || p.workflow.Wait(t, names[0]).Status != sfntest.StatusFailed {
		t.Fatalf("executions %v, want one, failed", names)
	}
	p.failOnPurpose(t) // the trouble is over

	if res := p.reconcile(t); res.Deliveries != 1 {
		t.Fatalf("reconciler %+v, want the delivery queued again", res)
	}
	p.deliverAll(t)
	names = p.workflow.Names()
	if len(names) != 2 || !strings.HasSuffix(names[1], "-r1") {
		t.Fatalf("executions %v, want a restart", names)
	}
	if res := p.workflow.Wait(t, names[1]); res.Status != sfntest.StatusSucceeded {
		t.Fatalf("the restart ended %v", res)
	}
	ds, _, err := p.svc.Deliveries.Deliveries(t.Context(), p.brand.ID, endpoints.DeliveryFilter{EventID: evt}, records.ListParams{Limit: 10})
	if err != nil || len(ds) != 1 || ds[0].Status != tally.DeliverySucceeded || len(ds[0].Attempts) != 3 || len(p.rcv.requests()) != 3 {
		t.Fatalf("delivery %+v (%v), %d requests; want succeeded at attempt 3, each attempt sent once", ds, err, len(p.rcv.requests()))
	}
	if res := p.reconcile(t); res.Events != 0 || res.Deliveries != 0 {
		t.Errorf("a further run re-drove %+v", res)
	}
}

func ptr[T any](v T) *T { return &v }

// The conversions' side (service.WithStreamConversions): a conversion's
// request writes its marker, then the conversion, and the fan-out makes
// its event from the stream. The drops below lose the stream's record, or
// a step between two writes.

// errCrash is a write that failed on purpose.
var errCrash = errors.New("crashed on purpose")

// crashingStore is the table with the writes crash names failing: a
// request or a step stopped between two of its writes.
type crashingStore struct {
	*dynamo.Store
	crash func(store.Op) bool
}

func (s crashingStore) Transact(ctx context.Context, ops ...store.Op) error {
	if slices.ContainsFunc(ops, s.crash) {
		return errCrash
	}
	return s.Store.Transact(ctx, ops...)
}

// conversionPipeline is a pipeline with a conversion's set-up (a key, an
// offer, an active partner) whose events are fanned out already (they
// make no delivery: the subscription is to conversion.created).
type conversionPipeline struct {
	*pipeline
	key, offerID, partnerID string
}

func newConversionPipeline(t *testing.T) *conversionPipeline {
	t.Helper()
	p := &conversionPipeline{pipeline: newPipeline(t, 180*time.Second, ok200)}
	p.key, p.offerID, p.partnerID = p.conversionSetup(t)
	p.fanout(t, p.send, p.streamBatch(t))
	if n := p.deliverAll(t); n != 0 {
		t.Fatalf("the set-up's events made %d deliveries", n)
	}
	return p
}

// conversionTraceID is the trace every conversion request continues: its
// event, made from the stream or again from FanoutDLQ, keeps it.
const conversionTraceID = "5c1f0e527f1b4d2f9a550c1d2e3f4a5b"

// post records a conversion through the conversions function over st and
// returns the status and the answer.
func (p *conversionPipeline) post(t *testing.T, st store.Store, txn string) (int, tally.Conversion) {
	t.Helper()
	api, err := api.APIHandler(servicetest.New(st, service.OnAWS()).API(), httpapi.Config{Logger: p.log}, httpapi.GroupConversions)
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":%q,"revenueCents":8990,"currency":"EUR"}`, p.offerID, p.partnerID, txn)
	ev := apiEvent("POST", "/api/v1/conversions", p.key, body)
	ev.Headers["traceparent"] = "00-" + conversionTraceID + "-b7ad6b7169203331-01"
	resp, err := api(lambdaContext(t.Context(), "conversions"), roundTrip(t, ev))
	if err != nil {
		t.Fatal(err)
	}
	var c tally.Conversion
	json.Unmarshal([]byte(resp.Body), &c)
	return resp.StatusCode, c
}

// convert records a new conversion and returns its id.
func (p *conversionPipeline) convert(t *testing.T, txn string) string {
	t.Helper()
	status, c := p.post(t, dynamo.New(p.client, p.table), txn)
	if status != http.StatusCreated {
		t.Fatalf("POST /conversions %s: %d", txn, status)
	}
	return c.ID
}

// conversionRecords are the stream's records of new conversions.
func (p *conversionPipeline) conversionRecords(t *testing.T) []events.DynamoDBEventRecord {
	t.Helper()
	return slices.DeleteFunc(p.streamBatch(t), func(rec events.DynamoDBEventRecord) bool {
		_, ok := rec.Change.NewImage[conversions.FanOutAttr]
		return !ok
	})
}

// redriveBatch runs the reconciler, which must take one failed stream
// batch from FanoutDLQ and dispatch n conversions again, then the deliver
// function, which must take their n messages.
func (p *conversionPipeline) redriveBatch(t *testing.T, n int) {
	t.Helper()
	if res := p.reconcile(t); res.Batches != 1 || res.Conversions != n || res.Events != 0 {
		t.Fatalf("reconciler %+v, want one batch and %d conversions dispatched again", res, n)
	}
	if got := p.deliverAll(t); got != n {
		t.Errorf("deliver took %d messages, want %d", got, n)
	}
}

// recoveredConversions checks the end state: the receiver got each
// conversion's conversion.created once, in its request's trace, its
// delivery succeeded at attempt 1, and a further run finds nothing.
func (p *conversionPipeline) recoveredConversions(t *testing.T, conversionIDs ...string) {
	t.Helper()
	events := map[string]string{} // conversion → event
	for _, r := range p.rcv.requests() {
		var env tally.Event
		var data tally.ConversionEventData
		if json.Unmarshal(r.body, &env) != nil || json.Unmarshal(env.Data, &data) != nil || env.Event != tally.EventConversionCreated {
			t.Fatalf("the receiver got %s", r.body)
		}
		if tp := r.header.Get("traceparent"); !strings.HasPrefix(tp, "00-"+conversionTraceID+"-") {
			t.Errorf("the event of %s came with traceparent %q, want its request's trace %s", data.ConversionID, tp, conversionTraceID)
		}
		events[data.ConversionID] = env.ID
	}
	var eventIDs []string
	for _, id := range conversionIDs {
		if events[id] == "" {
			t.Errorf("conversion %s was not delivered", id)
		}
		eventIDs = append(eventIDs, events[id])
	}
	p.recovered(t, eventIDs...)
}

// The stream's records of new conversions are never handled: a batch
// exhausted its retries before any fan-out (its records expire with the
// stream), and FanoutDLQ has the batch's arrival times. The reconciler
// dispatches again every conversion made then: those never fanned out are
// delivered, and one delivered already (its record was in the batch too)
// is not delivered again.
func TestReconcileConversionsTheStreamLost(t *testing.T) {
	t.Parallel()
	p := newConversionPipeline(t)
	delivered := p.convert(t, "order-0")
	p.fanout(t, p.send, p.conversionRecords(t))
	if n := p.deliverAll(t); n != 1 {
		t.Fatalf("deliver took %d messages, want the first conversion's", n)
	}
	a, b := p.convert(t, "order-1"), p.convert(t, "order-2")
	batch := p.conversionRecords(t)
	if len(batch) != 3 {
		t.Fatalf("the stream has %d conversion inserts, want 3", len(batch))
	}
	p.gaveUp(t, batch)
	p.redriveBatch(t, 3)
	p.recoveredConversions(t, delivered, a, b)
}

// A run ran out of time on a failed batch and queued its message again
// with where it got to (tallyResume, after the second of four conversions
// in the order it reads them: by shard, then id): the next run dispatches
// only the conversions past it, and each conversion is delivered once.
func TestReconcileConversionsBatchResumed(t *testing.T) {
	t.Parallel()
	p := newConversionPipeline(t)
	ids := []string{p.convert(t, "order-1"), p.convert(t, "order-2"), p.convert(t, "order-3"), p.convert(t, "order-4")}
	slices.SortFunc(ids, func(a, b string) int {
		return cmp.Or(cmp.Compare(keys.ShardOf(a), keys.ShardOf(b)), strings.Compare(a, b))
	})
	all := p.conversionRecords(t)
	done := slices.DeleteFunc(slices.Clone(all), func(rec events.DynamoDBEventRecord) bool {
		return !slices.Contains(ids[:2], rec.Change.Keys["sk"].String())
	})
	p.fanout(t, p.send, done) // what the run that ran out of time dispatched
	if n := p.deliverAll(t); n != 2 {
		t.Fatalf("deliver took %d messages, want the first two conversions'", n)
	}
	p.gaveUpResumed(t, all, webhooks.StreamPosition{Brand: p.brand.ID, Shard: keys.ShardOf(ids[1]), After: ids[1]})
	p.redriveBatch(t, 2)
	p.recoveredConversions(t, ids...)
}

// The fan-out made the conversion's event but could not queue its
// delivery (SQS refuses) until Lambda gave the batch up: the reconciler
// dispatches it again from FanoutDLQ's message.
func TestReconcileConversionsFanoutGaveUp(t *testing.T) {
	t.Parallel()
	p := newConversionPipeline(t)
	a := p.convert(t, "order-1")
	batch := p.conversionRecords(t)
	down := sqstest.NewSender("http://127.0.0.1:1") // nothing listens: every call fails
	for range 3 {
		if out := p.fanout(t, down, batch); len(out.BatchItemFailures) != 1 {
			t.Fatalf("fanout with the queue down: %+v, want a failure", out)
		}
	}
	p.gaveUp(t, batch)
	p.unwritten(t, "")
	p.redriveBatch(t, 1)
	p.recoveredConversions(t, a)
}

// A conversion's request stops between its marker and the conversion (its
// function timed out, or the table failed it), so the client got an
// error: nothing was accepted, and nothing is delivered for it. The
// client's retry, which finds the marker and no conversion, writes the
// conversion with the marker's id (201); later retries replay it (200),
// and it is delivered once.
func TestReconcileConversionRequestStopped(t *testing.T) {
	t.Parallel()
	p := newConversionPipeline(t)
	stopped := crashingStore{dynamo.New(p.client, p.table), func(op store.Op) bool { return strings.Contains(op.Target().PK, "#CNV#") }}
	if status, _ := p.post(t, stopped, "order-1"); status != http.StatusInternalServerError {
		t.Fatalf("the stopped request answered %d, want 500", status)
	}
	if res := p.reconcile(t); res.Events != 0 || res.Conversions != 0 {
		t.Fatalf("reconciler %+v, want nothing fanned out", res)
	}
	if cs, _, err := p.svc.Conversions.Conversions(t.Context(), p.brand.ID, conversions.ConversionFilter{}, records.ListParams{Limit: 10}); err != nil || len(cs) != 0 {
		t.Fatalf("conversions %+v, %v; want none", cs, err)
	}

	status, c := p.post(t, dynamo.New(p.client, p.table), "order-1")
	if status != http.StatusCreated || c.ID == "" {
		t.Fatalf("the retry answered %d %+v, want 201 with the conversion", status, c)
	}
	if again, c2 := p.post(t, dynamo.New(p.client, p.table), "order-1"); again != http.StatusOK || c2.ID != c.ID {
		t.Fatalf("a further retry answered %d %s, want 200 with %s", again, c2.ID, c.ID)
	}
	p.fanout(t, p.send, p.streamBatch(t))
	if n := p.deliverAll(t); n != 1 {
		t.Errorf("deliver took %d messages, want 1", n)
	}
	p.recoveredConversions(t, c.ID)
}

// A FanoutDLQ message the reconciler cannot read (no arrival times) is
// logged and deleted, and the run reports it (its errors alarm): it does
// not come back to fail every run for the queue's 14 days.
func TestReconcileDeletesAnUnreadableFailedBatch(t *testing.T) {
	t.Parallel()
	p := newConversionPipeline(t)
	if _, err := p.sqs.SendMessage(t.Context(), &sqs.SendMessageInput{QueueUrl: &p.fanoutDLQ.URL, MessageBody: ptr(`{"requestContext":{}}`)}); err != nil {
		t.Fatal(err)
	}
	svc := servicetest.New(dynamo.New(p.client, p.table), service.OnAWS())
	r := fanout.DefaultReconciler
	r.FanoutDLQ = &fanout.DLQ{Client: p.send, URL: p.fanoutDLQ.URL}
	h := r.Handler(svc.Webhooks, p.send, p.queue.URL, p.log)
	if _, err := h(lambdaContext(t.Context(), "reconciler"), events.EventBridgeEvent{}); err == nil || !strings.Contains(err.Error(), "unreadable failed stream batch") {
		t.Errorf("the run with an unreadable message answered %v, want it reported", err)
	}
	if res := p.reconcile(t); res.Batches != 0 {
		t.Errorf("the next run %+v, want no batch: the unreadable one deleted", res)
	}
}
