package lambdafn_test

// The webhook pipeline's functions (fanout, deliver, attempt) run here
// through their real handlers, on both stores, with webhook receivers on
// loopback (httptest). SQS is fauxqs (queue_test.go). Step Functions is
// faked at the SDK interface deliver takes (deliver.Executions), since the
// embedded store cannot be shared with local-sfn's task programs;
// internal/sfntest and bootstrap_test.go drive local-sfn through the SDK's
// client instead.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/smithy-go"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/lambdafn/deliver"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/sfntest"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// The pipeline's AWS resources as the functions' environment names them
// (the queue is each fixture's own, in fauxqs).
const (
	stateMachineARN = "arn:aws:states:eu-west-1:123456789012:stateMachine:RetryStateMachine-Vb3Xy9Qw1Ert"
	webhookSecret   = "whsec_5f0c9a7e3b1d4c6a8e2f"
)

// fakeExecutions stands in for the Step Functions client
// (deliver.Executions) in these handler tests, which run on both stores
// (the embedded one cannot be shared with local-sfn's task programs;
// internal/sfntest runs the real client against local-sfn). It answers
// StartExecution as a STANDARD state machine does: a name not used before
// starts an execution; the name of a running execution with the same input
// answers with that execution (no new one); otherwise the name is refused
// with ExecutionAlreadyExists (a closed execution's name stays taken for 90
// days). DescribeExecution answers an execution's status.
type fakeExecutions struct {
	mu      sync.Mutex
	calls   []*sfn.StartExecutionInput
	started []*sfn.StartExecutionInput // new executions, in order
	status  map[string]sfntypes.ExecutionStatus
	refused int   // ExecutionAlreadyExists answers
	err     error // if set, every call fails with it
}

var executionName = regexp.MustCompile(`^[0-9A-Za-z_-]{1,80}$`)

func (x *fakeExecutions) StartExecution(ctx context.Context, in *sfn.StartExecutionInput, _ ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.calls = append(x.calls, in)
	name := aws.ToString(in.Name)
	switch {
	case x.err != nil:
		return nil, x.err
	case aws.ToString(in.StateMachineArn) == "":
		return nil, &sfntypes.InvalidArn{Message: aws.String("stateMachineArn is required")}
	case !executionName.MatchString(name):
		return nil, &sfntypes.InvalidName{Message: aws.String("invalid name " + name)}
	case !json.Valid([]byte(aws.ToString(in.Input))):
		return nil, &sfntypes.InvalidExecutionInput{Message: aws.String("input is not JSON")}
	}
	out := &sfn.StartExecutionOutput{ExecutionArn: aws.String(executionARN(aws.ToString(in.StateMachineArn), name)), StartDate: aws.Time(time.Now())}
	for _, prev := range x.started {
		if aws.ToString(prev.Name) != name {
			continue
		}
		if x.status[name] == sfntypes.ExecutionStatusRunning && aws.ToString(prev.Input) == aws.ToString(in.Input) {
			return out, nil
		}
		x.refused++
		return nil, &sfntypes.ExecutionAlreadyExists{Message: aws.String("Execution Already Exists: '" + aws.ToString(out.ExecutionArn) + "'")}
	}
	x.started = append(x.started, in)
	if x.status == nil {
		x.status = map[string]sfntypes.ExecutionStatus{}
	}
	x.status[name] = sfntypes.ExecutionStatusRunning
	return out, nil
}

func (x *fakeExecutions) DescribeExecution(ctx context.Context, in *sfn.DescribeExecutionInput, _ ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.err != nil {
		return nil, x.err
	}
	arn := aws.ToString(in.ExecutionArn)
	for _, prev := range x.started {
		if executionARN(aws.ToString(prev.StateMachineArn), aws.ToString(prev.Name)) == arn {
			return &sfn.DescribeExecutionOutput{ExecutionArn: in.ExecutionArn, Name: prev.Name, Input: prev.Input,
				StateMachineArn: prev.StateMachineArn, Status: x.status[aws.ToString(prev.Name)], StartDate: aws.Time(time.Now())}, nil
		}
	}
	return nil, &sfntypes.ExecutionDoesNotExist{Message: aws.String("Execution Does Not Exist: '" + arn + "'")}
}

func executionARN(stateMachineARN, name string) string {
	return strings.Replace(stateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}

// endAll ends every running execution with status.
func (x *fakeExecutions) endAll(status sfntypes.ExecutionStatus) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for name, st := range x.status {
		if st == sfntypes.ExecutionStatusRunning {
			x.status[name] = status
		}
	}
}

func (x *fakeExecutions) startedNames() []string {
	x.mu.Lock()
	defer x.mu.Unlock()
	var names []string
	for _, in := range x.started {
		names = append(names, aws.ToString(in.Name))
	}
	return names
}

// receiver is a webhook receiver on loopback that answers with the statuses
// it is given, in turn (the last one repeats), and keeps what it got.
type receiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	statuses []int
	got      []*http.Request // their bodies are in bodies; request(i) puts one back
	bodies   [][]byte
}

func newReceiver(t *testing.T, statuses ...int) *receiver {
	t.Helper()
	r := &receiver{statuses: statuses}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req.Clone(context.Background()))
		r.bodies = append(r.bodies, body)
		status := r.statuses[min(len(r.got), len(r.statuses))-1]
		r.mu.Unlock()
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"received":%d}`, status)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// request returns request i with a fresh body.
func (r *receiver) request(i int) (*http.Request, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	req := r.got[i].Clone(context.Background())
	req.Body = io.NopCloser(bytes.NewReader(r.bodies[i]))
	return req, r.bodies[i]
}

// subscribe adds a subscription of the fixture's brand; with a receiver
// (statuses given) its URL is the receiver's, else an https URL nothing is
// sent to.
func (f *fixture) subscribe(t *testing.T, names []string, secret string, statuses ...int) tally.Subscription {
	t.Helper()
	url := "https://hooks.example.com/tally/" + strconv.Itoa(len(f.subs))
	var rcv *receiver
	if len(statuses) > 0 {
		rcv = newReceiver(t, statuses...)
		url = rcv.srv.URL + "/hooks/tally"
	}
	sub := f.subscribeURL(t, url, names, secret)
	if rcv != nil {
		f.receivers[sub.ID] = rcv
	}
	return sub
}

// unresolvable is a receiver URL whose host no resolver looks up (RFC 7686
// .onion names: Go's fails them at once, asking no server): an attempt to
// it fails as dns_error without any traffic, and is retried.
func unresolvable(n int) string {
	return "https://receiver-" + strconv.Itoa(n) + ".tally-test.onion/hooks"
}

// retriedFailure reports whether an attempt to an unresolvable receiver
// failed as a network failure, which is retried (not blocked_address, which
// is not).
func retriedFailure(a tally.Attempt) bool {
	return a.StatusCode == 0 && a.Error != "" && a.Error != tally.AttemptBlocked
}

// subscribeURL subscribes url to names.
func (f *fixture) subscribeURL(t *testing.T, url string, names []string, secret string) tally.Subscription {
	t.Helper()
	in := endpoints.SubscriptionInput{URL: &url, Events: names}
	if secret != "" {
		in.Secret = &secret
	}
	sub, err := f.svc.Endpoints.CreateSubscription(t.Context(), f.brand.ID, in)
	if err != nil {
		t.Fatal(err)
	}
	f.subs = append(f.subs, sub)
	return sub
}

// applied has a partner apply and returns the partner.applied event it made
// (also in f.event and f.vars).
func (f *fixture) applied(t *testing.T, name string) tally.Event {
	t.Helper()
	p := f.appliedPartner(t, name, "team@"+strings.ToLower(strings.ReplaceAll(name, " ", "-"))+".example")
	evts, _, err := f.svc.Events.Events(t.Context(), f.brand.ID, records.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evts {
		var data struct {
			PartnerID string `json:"partnerId"`
		}
		if err := json.Unmarshal(e.Data, &data); err == nil && e.Event == tally.EventPartnerApplied && data.PartnerID == p.ID {
			f.event = e
			f.vars["TALLY_EVENT_ID"] = e.ID
			return e
		}
	}
	t.Fatalf("no partner.applied event for %s", p.ID)
	return tally.Event{}
}

// deliveriesOf returns the deliveries of an event by subscription id.
func (f *fixture) deliveriesOf(t *testing.T, eventID string) map[string]tally.Delivery {
	t.Helper()
	ds, _, err := f.svc.Deliveries.Deliveries(t.Context(), f.brand.ID, endpoints.DeliveryFilter{EventID: eventID}, records.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]tally.Delivery{}
	for _, d := range ds {
		if _, dup := out[d.SubscriptionID]; dup {
			t.Errorf("two deliveries of %s to %s", eventID, d.SubscriptionID)
		}
		out[d.SubscriptionID] = d
	}
	return out
}

func (f *fixture) delivery(t *testing.T, id string) tally.Delivery {
	t.Helper()
	d, err := f.svc.Deliveries.Delivery(t.Context(), f.brand.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// messageBody is a delivery message as the fan-out and the manual retry
// queue it.
func messageBody(brandID, deliveryID string) string {
	return `{"brandId":"` + brandID + `","deliveryId":"` + deliveryID + `"}`
}

// carried returns the deliveries the messages carry, planned and not
// written (webhooks.Engine.Dispatch), by subscription.
func carried(t *testing.T, msgs []string) map[string]tally.Delivery {
	t.Helper()
	out := map[string]tally.Delivery{}
	for _, body := range msgs {
		var m struct{ Planned *tally.Delivery }
		if err := json.Unmarshal([]byte(body), &m); err != nil || m.Planned == nil {
			t.Fatalf("message %q carries no delivery (%v)", body, err)
		}
		out[m.Planned.SubscriptionID] = *m.Planned
	}
	return out
}

// plannedOf returns the message among msgs that carries the event's
// delivery, planned (webhooks.Engine.Dispatch).
func plannedOf(t *testing.T, msgs []string, eventID string) (string, bool) {
	t.Helper()
	for _, body := range msgs {
		var m struct {
			Planned struct{ EventID string }
		}
		if err := json.Unmarshal([]byte(body), &m); err != nil {
			t.Fatalf("message %q: %v", body, err)
		}
		if m.Planned.EventID == eventID {
			return body, true
		}
	}
	return "", false
}

// roundTrip encodes a handler's answer to JSON and decodes it into Out, as
// the Lambda runtime and the service that invoked the function do.
func roundTrip[Out any](t *testing.T, v any) Out {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out Out
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func fanoutCall(t *testing.T, f *fixture) func(events.DynamoDBEvent) events.DynamoDBEventResponse {
	h := fanout.Handler(f.svc.Webhooks, f.deliveryQueue(t).client, f.deliveryQueue(t).URL, f.cfg.Logger)
	return func(ev events.DynamoDBEvent) events.DynamoDBEventResponse {
		t.Helper()
		out, err := h(lambdaContext(t, "fanout-invocation"), ev)
		if err != nil {
			t.Fatalf("the fan-out failed the whole batch: %v", err)
		}
		return roundTrip[events.DynamoDBEventResponse](t, out)
	}
}

func deliverCall(t *testing.T, f *fixture) func(events.SQSEvent) events.SQSEventResponse {
	h := deliver.DeliverHandler(f.svc.Webhooks, f.sender, f.executions, stateMachineARN, deliver.Later(f.deliveryQueue(t).client, f.deliveryQueue(t).URL), f.cfg.Logger)
	return func(ev events.SQSEvent) events.SQSEventResponse {
		t.Helper()
		out, err := h(lambdaContext(t, "deliver-invocation"), ev)
		if err != nil {
			t.Fatalf("deliver failed the whole batch: %v", err)
		}
		return roundTrip[events.SQSEventResponse](t, out)
	}
}

func attemptCall(t *testing.T, f *fixture) func(attempt.RetryInput) (map[string]any, error) {
	h := attempt.Handler(f.svc.Webhooks, f.sender)
	return func(in attempt.RetryInput) (map[string]any, error) {
		t.Helper()
		out, err := h(lambdaContext(t, "attempt-invocation"), in)
		if err != nil {
			return nil, err
		}
		return roundTrip[map[string]any](t, out), nil
	}
}

func streamFailures(r events.DynamoDBEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func queueFailures(r events.SQSEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// wantMessages checks that msgs are exactly one message per delivery in ds
// (in any order).
func wantMessages(t *testing.T, f *fixture, msgs []string, ds map[string]tally.Delivery) {
	t.Helper()
	var want []string
	for _, d := range ds {
		want = append(want, messageBody(f.brand.ID, d.ID))
	}
	got := slices.Sorted(slices.Values(msgs))
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("queued messages:\n%q\nwant one per delivery:\n%q", got, want)
	}
}

// streamRecord is the sample's INSERT record for another event, at seq.
func streamRecord(t *testing.T, sample events.DynamoDBEvent, eventID, seq string) events.DynamoDBEventRecord {
	t.Helper()
	raw, err := json.Marshal(sample.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	rec := decodeEvent[events.DynamoDBEventRecord](t, raw)
	key := events.NewStringAttribute("EVT#" + eventID)
	rec.Change.Keys = maps.Clone(rec.Change.Keys)
	rec.Change.Keys["pk"] = key
	rec.Change.NewImage = maps.Clone(rec.Change.NewImage)
	rec.Change.NewImage["pk"] = key
	rec.Change.SequenceNumber = seq
	return rec
}

func init() {
	cases["fanout-stream"] = sampleCase{
		setup: func(t *testing.T, f *fixture) {
			f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret)
			f.subscribe(t, []string{tally.EventConversionCreated, tally.EventPartnerApplied}, "")
			f.subscribe(t, []string{tally.EventConversionApproved}, "") // gets nothing
			f.applied(t, "Runner Media")
		},
		fanout: func(t *testing.T, f *fixture, ev events.DynamoDBEvent, call func(events.DynamoDBEvent) events.DynamoDBEventResponse) {
			if len(ev.Records) != 2 || ev.Records[0].EventName != "INSERT" || ev.Records[1].EventName != "MODIFY" {
				t.Fatalf("the sample should be an INSERT and a MODIFY record: %+v", ev.Records)
			}
			if fails := streamFailures(call(ev)); len(fails) != 0 {
				t.Fatalf("batch item failures %v, want none", fails)
			}
			if ds := f.deliveriesOf(t, f.event.ID); len(ds) != 0 {
				t.Errorf("the fan-out wrote %d deliveries, want none: each goes in its message", len(ds))
			}
			ds := carried(t, f.deliveryQueue(t).messages(t))
			if len(ds) != 2 {
				t.Fatalf("%d deliveries carried, want one per subscription to partner.applied: %v", len(ds), ds)
			}
			for _, sub := range f.subs[:2] {
				d, ok := ds[sub.ID]
				if !ok || d.Status != tally.DeliveryPending || d.Event != tally.EventPartnerApplied || len(d.Attempts) != 0 {
					t.Errorf("delivery to %s = %+v, want a pending partner.applied without attempts", sub.ID, d)
				}
			}
			// One batch of two: the MODIFY record was skipped (a second
			// fan-out of the event would have queued its deliveries again).
			if n := f.deliveryQueue(t).callCount(); n != 1 {
				t.Errorf("%d SendMessageBatch calls, want 1", n)
			}
			if url := f.deliveryQueue(t).sendCalls()[0].QueueURL; url != f.deliveryQueue(t).URL {
				t.Errorf("QueueUrl = %q, want %q", url, f.deliveryQueue(t).URL)
			}

			// The stream repeats a batch after a failure: nothing is
			// written, and the deliveries are queued again, the same ones
			// (deliver sends each at most once).
			if fails := streamFailures(call(ev)); len(fails) != 0 {
				t.Fatalf("repeated batch: failures %v", fails)
			}
			if msgs := f.deliveryQueue(t).messages(t); len(msgs) != 4 {
				t.Errorf("after the repeat %d messages, want the 2 queued again", len(msgs))
			} else if again := carried(t, msgs[2:]); !maps.EqualFunc(ds, again, func(a, b tally.Delivery) bool { return a.ID == b.ID }) {
				t.Errorf("the repeated batch carried other deliveries: %v, then %v", ds, again)
			}
		},
	}

	cases["deliver-sqs"] = sampleCase{
		setup: func(t *testing.T, f *fixture) {
			ok := f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret, 200)
			failing := f.subscribe(t, []string{tally.EventPartnerApplied}, "", 503)
			evt := f.applied(t, "Runner Media")
			if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
				t.Fatal(err)
			}
			ds := f.deliveriesOf(t, evt.ID)
			f.vars["TALLY_DELIVERY_ID"] = ds[ok.ID].ID
			f.vars["TALLY_OTHER_DELIVERY_ID"] = ds[failing.ID].ID
		},
		deliver: func(t *testing.T, f *fixture, ev events.SQSEvent, call func(events.SQSEvent) events.SQSEventResponse) {
			okID, failingID := f.vars["TALLY_DELIVERY_ID"], f.vars["TALLY_OTHER_DELIVERY_ID"]
			okRcv, failingRcv := f.receivers[f.subs[0].ID], f.receivers[f.subs[1].ID]
			if len(ev.Records) != 3 {
				t.Fatalf("the sample has %d messages, want 3", len(ev.Records))
			}
			bad := ev.Records[2].MessageId
			if fails := queueFailures(call(ev)); !slices.Equal(fails, []string{bad}) {
				t.Fatalf("batch item failures %v, want only the message that is no delivery (%s)", fails, bad)
			}

			// Attempt 1 of each: signed where the subscription has a secret.
			if okRcv.count() != 1 || failingRcv.count() != 1 {
				t.Fatalf("the receivers got %d and %d requests, want 1 each", okRcv.count(), failingRcv.count())
			}
			req, body := okRcv.request(0)
			if _, err := webhook.VerifyRequest(webhookSecret, req, 5*time.Minute); err != nil {
				t.Errorf("the request to the subscription with a secret does not verify: %v", err)
			}
			if req.Header.Get("X-Tally-Webhook-Id") != okID || req.Header.Get("X-Tally-Event") != tally.EventPartnerApplied {
				t.Errorf("headers %v, want X-Tally-Webhook-Id %s and X-Tally-Event partner.applied", req.Header, okID)
			}
			if env := roundTrip[tally.Event](t, json.RawMessage(body)); env.ID != f.event.ID {
				t.Errorf("the body's id is %q, want the event %s", env.ID, f.event.ID)
			}
			req, _ = failingRcv.request(0)
			if sig := req.Header.Get("X-Tally-Signature"); sig != "" || req.Header.Get("X-Tally-Webhook-Id") != failingID {
				t.Errorf("the request to the subscription without a secret: signature %q, webhook id %q", sig, req.Header.Get("X-Tally-Webhook-Id"))
			}
			if d := f.delivery(t, okID); d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 200 {
				t.Errorf("delivery %s = %+v, want succeeded after one attempt", okID, d)
			}
			failing := f.delivery(t, failingID)
			if d := failing; d.Status != tally.DeliveryPending || len(d.Attempts) != 1 || d.Attempts[0].StatusCode != 503 || d.NextAttemptAt == nil {
				t.Fatalf("delivery %s = %+v, want pending after one failed attempt", failingID, d)
			}

			// Only the failed one goes on to the retry state machine, named
			// after the delivery and its first schedule.
			if got := f.executions.startedNames(); !slices.Equal(got, []string{failingID + "-0"}) {
				t.Fatalf("executions started: %v, want [%s-0]", got, failingID)
			}
			in := f.executions.started[0]
			if arn := aws.ToString(in.StateMachineArn); arn != stateMachineARN {
				t.Errorf("stateMachineArn = %q", arn)
			}
			// The input says when attempt 2 is due: the retry workflow's
			// first wait lasts until then.
			var input attempt.RetryInput
			if err := json.Unmarshal([]byte(aws.ToString(in.Input)), &input); err != nil || input.BrandID != f.brand.ID || input.DeliveryID != failingID ||
				input.Attempt != 0 || input.ResumeAt != nil || input.NextAttemptAt == nil || !input.NextAttemptAt.Equal(failing.NextAttemptAt.Time) {
				t.Errorf("execution input %s, want the delivery %s due at %v", aws.ToString(in.Input), failingID, failing.NextAttemptAt)
			}

			// SQS delivers at least once. The same batch again while the
			// execution runs (Step Functions answers a repeated start with
			// the running execution) sends nothing and starts nothing.
			if fails := queueFailures(call(ev)); !slices.Equal(fails, []string{bad}) {
				t.Errorf("repeated batch: failures %v, want only %s", fails, bad)
			}
			if okRcv.count() != 1 || failingRcv.count() != 1 || len(f.executions.startedNames()) != 1 {
				t.Errorf("repeated batch: the receivers got %d and %d requests, executions %v; want still 1, 1 and one",
					okRcv.count(), failingRcv.count(), f.executions.startedNames())
			}

			// The execution fails without deciding the delivery (its abandon
			// task failed too), or times out, or is stopped: the delivery is
			// pending with nothing to carry its schedule on. The message again
			// (the reconciler re-drives such deliveries) restarts the schedule
			// under a new name at attempt 2, when attempt 2 is due; after
			// three restarts that ended too, the delivery is marked failed.
			due := f.delivery(t, failingID).NextAttemptAt
			for restart := 1; restart <= 4; restart++ {
				f.executions.endAll(sfntypes.ExecutionStatusFailed)
				if fails := queueFailures(call(ev)); !slices.Equal(fails, []string{bad}) {
					t.Errorf("restart %d: failures %v, want only %s", restart, fails, bad)
				}
				names := f.executions.startedNames()
				if restart == 4 {
					if len(names) != 4 {
						t.Errorf("a fourth restart: executions %v", names)
					}
					break
				}
				if want := fmt.Sprintf("%s-0-r%d", failingID, restart); len(names) != restart+1 || names[restart] != want {
					t.Fatalf("restart %d: executions %v, want a new one named %s", restart, names, want)
				}
				var in attempt.RetryInput
				if err := json.Unmarshal([]byte(aws.ToString(f.executions.started[restart].Input)), &in); err != nil ||
					in.DeliveryID != failingID || in.Attempt != 2 || in.ResumeAt == nil || !in.ResumeAt.Equal(due.Time) {
					t.Errorf("restart %d: input %s, want attempt 2 of %s resuming at %v", restart, aws.ToString(f.executions.started[restart].Input), failingID, due)
				}
				if d := f.delivery(t, failingID); d.Status != tally.DeliveryPending {
					t.Errorf("restart %d: the delivery is %s", restart, d.Status)
				}
			}
			if d := f.delivery(t, failingID); d.Status != tally.DeliveryFailed || len(d.Attempts) != 1 || d.NextAttemptAt != nil {
				t.Errorf("after every restart ended: delivery %+v, want failed with its one attempt", d)
			}
			if d := f.delivery(t, okID); d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 {
				t.Errorf("the delivered one changed: %+v", d)
			}
			if okRcv.count() != 1 || failingRcv.count() != 1 {
				t.Errorf("the receivers got %d and %d requests, want 1 each: restarts send nothing themselves", okRcv.count(), failingRcv.count())
			}
		},
	}

	cases["reconciler-scheduled"] = sampleCase{
		setup: func(t *testing.T, f *fixture) {
			f.fanOutAll(t) // the fixture's own events, before any subscription
			f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret, 200)
			f.applied(t, "Runner Media") // never fanned out: the stream dropped it
			lost := f.applied(t, "Trail Tales")
			if _, err := f.svc.Webhooks.FanOut(t.Context(), lost.ID); err != nil { // fanned out, its message lost
				t.Fatal(err)
			}
		},
		reconciler: func(t *testing.T, f *fixture, call func() (fanout.ReconcilerResult, error)) {
			q, rcv := f.deliveryQueue(t), f.receivers[f.subs[0].ID]
			f.clock.Add(5 * time.Minute)
			if res, err := call(); err != nil || res != (fanout.ReconcilerResult{}) {
				t.Fatalf("within the grace time: %+v, %v; want nothing re-driven", res, err)
			}
			f.clock.Add(6 * time.Minute)
			res, err := call()
			if err != nil || res.Events != 1 || res.Deliveries != 1 || res.Deferred {
				t.Fatalf("after the grace time: %+v, %v; want the event fanned out and the delivery queued", res, err)
			}
			msgs := sqstest.Receive(t, q.direct, q.Queue, 10, time.Second)
			if len(msgs) != 2 {
				t.Fatalf("%d messages queued, want one per delivery (2)", len(msgs))
			}
			// The deliver function takes the messages: both delivered once.
			resp := deliverCall(t, f)(events.SQSEvent{Records: msgs})
			if fails := queueFailures(resp); len(fails) != 0 {
				t.Fatalf("deliver: failures %v", fails)
			}
			sqstest.Finish(t, q.direct, q.Queue, msgs, resp)
			if rcv.count() != 2 {
				t.Errorf("the receiver got %d requests, want one per event", rcv.count())
			}
			// Nothing is left to re-drive.
			if res, err := call(); err != nil || res.Events != 0 || res.Deliveries != 0 {
				t.Errorf("the next run: %+v, %v; want nothing re-driven", res, err)
			}
			if left := sqstest.Receive(t, q.direct, q.Queue, 10, 0); len(left) != 0 {
				t.Errorf("the next run queued %d messages", len(left))
			}
			lines := f.logs.take(t)
			if last := lines[len(lines)-1]; last["msg"] != "reconciled" || last["events"] != float64(0) {
				t.Errorf("log line %v, want msg \"reconciled\" with the counts", last)
			}
		},
	}

	cases["attempt-task"] = sampleCase{
		setup: func(t *testing.T, f *fixture) {
			sub := f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret, 500, 200)
			evt := f.applied(t, "Runner Media")
			if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
				t.Fatal(err)
			}
			d := f.deliveriesOf(t, evt.ID)[sub.ID]
			res, err := f.svc.Webhooks.Attempt(t.Context(), endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}, 1, f.sender)
			if err != nil || res.Status != tally.DeliveryPending {
				t.Fatalf("setup: attempt 1 = %+v, %v; want pending", res, err)
			}
			f.vars["TALLY_DELIVERY_ID"] = d.ID
		},
		attempt: func(t *testing.T, f *fixture, in attempt.RetryInput, call func(attempt.RetryInput) (map[string]any, error)) {
			id := f.vars["TALLY_DELIVERY_ID"]
			if in.Attempt != 2 || in.BrandID != f.brand.ID || in.DeliveryID != id {
				t.Fatalf("the sample decodes to %+v", in)
			}
			rcv := f.receivers[f.subs[0].ID]
			out, err := call(in)
			if err != nil {
				t.Fatal(err)
			}
			wantField(t, out, "status", tally.DeliverySucceeded)
			wantField(t, out, "attempts", 2)
			wantField(t, out, "cycle", 0)
			wantField(t, out, "sent", true)
			if rcv.count() != 2 {
				t.Fatalf("the receiver got %d requests, want attempts 1 and 2", rcv.count())
			}
			req, _ := rcv.request(1)
			if _, err := webhook.VerifyRequest(webhookSecret, req, 5*time.Minute); err != nil || req.Header.Get("X-Tally-Webhook-Id") != id {
				t.Errorf("attempt 2: signature %v, webhook id %q, want a valid signature and %s", err, req.Header.Get("X-Tally-Webhook-Id"), id)
			}
			if d := f.delivery(t, id); d.Status != tally.DeliverySucceeded || len(d.Attempts) != 2 {
				t.Errorf("delivery = %+v, want succeeded after two attempts", d)
			}

			// The state machine may run a task twice: nothing is sent again.
			out, err = call(in)
			if err != nil {
				t.Fatal(err)
			}
			wantField(t, out, "status", tally.DeliverySucceeded)
			wantField(t, out, "attempts", 2)
			wantField(t, out, "sent", false)
			if rcv.count() != 2 {
				t.Errorf("the repeated task sent again: %d requests", rcv.count())
			}
		},
	}
}

// TestFanoutChunks checks that an event with 23 deliveries is queued in
// batches of at most 10 (SendMessageBatch's limit): 10, 10, 3, each message
// in its brand's message group.
func TestFanoutChunks(t *testing.T) {
	sample := samples(t)["fanout-stream"]
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		for range 23 {
			f.subscribe(t, []string{tally.EventPartnerApplied}, "")
		}
		f.applied(t, "Runner Media")
		ev := decodeEvent[events.DynamoDBEvent](t, sfntest.Substitute(t, sample, f.vars))
		if fails := streamFailures(fanoutCall(t, f)(ev)); len(fails) != 0 {
			t.Fatalf("failures %v", fails)
		}
		var sizes []int
		for _, in := range f.deliveryQueue(t).sendCalls() {
			sizes = append(sizes, len(in.Entries))
			// The brand is each message's group (fair queues).
			for _, e := range in.Entries {
				if e.MessageGroupID != f.brand.ID {
					t.Errorf("message %s in group %q, want the brand %s", e.ID, e.MessageGroupID, f.brand.ID)
				}
			}
		}
		if !slices.Equal(sizes, []int{10, 10, 3}) {
			t.Errorf("batch sizes %v, want [10 10 3]", sizes)
		}
		ds := f.deliveriesOf(t, f.event.ID)
		if len(ds) != 23 {
			t.Fatalf("%d deliveries, want 23", len(ds))
		}
		wantMessages(t, f, f.deliveryQueue(t).messages(t), ds)
	})
}

// TestDeliverWritesCarriedDeliveries checks an event's deliveries carried
// in their messages (two subscriptions): the fan-out writes none; attempt 1
// writes each once, with its outcome; the event stays in the outbox until
// the second is written; a repeated message sends nothing again.
func TestDeliverWritesCarriedDeliveries(t *testing.T) {
	sample := samples(t)["fanout-stream"]
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		subs := []tally.Subscription{
			f.subscribe(t, []string{tally.EventPartnerApplied}, "", 200),
			f.subscribe(t, []string{tally.EventPartnerApplied}, "", 200),
		}
		f.applied(t, "Runner Media")
		ev := decodeEvent[events.DynamoDBEvent](t, sfntest.Substitute(t, sample, f.vars))
		if fails := streamFailures(fanoutCall(t, f)(ev)); len(fails) != 0 {
			t.Fatalf("failures %v", fails)
		}
		msgs := f.deliveryQueue(t).messages(t)
		if ds := f.deliveriesOf(t, f.event.ID); len(msgs) != 2 || len(ds) != 0 {
			t.Fatalf("%d messages, %d deliveries written; want 2 messages carrying them, none written", len(msgs), len(ds))
		}
		outboxed := func() bool {
			t.Helper()
			d, err := f.svc.Webhooks.Overdue(t.Context(), f.clock.Now().Add(time.Hour), 10)
			if err != nil {
				t.Fatal(err)
			}
			return slices.Contains(d.Events, f.event.ID)
		}
		batch := func(bodies ...string) {
			t.Helper()
			var recs []events.SQSMessage
			for i, b := range bodies {
				recs = append(recs, events.SQSMessage{MessageId: "m" + strconv.Itoa(i), Body: b})
			}
			if fails := queueFailures(deliverCall(t, f)(events.SQSEvent{Records: recs})); len(fails) != 0 {
				t.Fatalf("deliver failures %v", fails)
			}
		}
		batch(msgs[0])
		if ds := f.deliveriesOf(t, f.event.ID); len(ds) != 1 || !outboxed() {
			t.Fatalf("after the first message: %d deliveries, in the outbox %v; want 1, and the event still there", len(ds), outboxed())
		}
		batch(msgs[1], msgs[0])
		for _, sub := range subs {
			d := f.deliveriesOf(t, f.event.ID)[sub.ID]
			if d.Status != tally.DeliverySucceeded || len(d.Attempts) != 1 || f.receivers[sub.ID].count() != 1 {
				t.Errorf("delivery to %s: %+v, %d requests; want succeeded at its one attempt", sub.ID, d, f.receivers[sub.ID].count())
			}
		}
		if outboxed() {
			t.Error("the event is still in the outbox with both deliveries written")
		}

		// Both messages of an event in one batch are attempted at once:
		// whichever is written last sees the other and takes the event out.
		for i := range 5 {
			evt := f.applied(t, "Trail Tales "+strconv.Itoa(i))
			ev := decodeEvent[events.DynamoDBEvent](t, sfntest.Substitute(t, sample, f.vars))
			before := len(f.deliveryQueue(t).messages(t))
			if fails := streamFailures(fanoutCall(t, f)(events.DynamoDBEvent{Records: ev.Records[:1]})); len(fails) != 0 {
				t.Fatalf("failures %v", fails)
			}
			batch(f.deliveryQueue(t).messages(t)[before:]...)
			if ds := f.deliveriesOf(t, evt.ID); len(ds) != 2 || outboxed() {
				t.Errorf("both messages of %s at once: %d deliveries, in the outbox %v; want 2, and out", evt.ID, len(ds), outboxed())
			}
		}
	})
}

// TestFanoutQueueFailures checks the partial batch response: when queueing
// an event's deliveries fails (the call, or one entry), that record's
// sequence number is reported and no delivery of a later record is queued,
// so that Lambda retries the batch from there; the retries create nothing
// twice. The batch's messages are queued together, 10 a call: A's 12 and
// B's 12 go as A0–A9, A10–A11 with B0–B7, B8–B11.
func TestFanoutQueueFailures(t *testing.T) {
	sample := samples(t)["fanout-stream"]
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		for range 12 {
			f.subscribe(t, []string{tally.EventPartnerApplied}, "")
		}
		a := f.applied(t, "Runner Media")
		b := f.applied(t, "Trail Tales")
		ev := decodeEvent[events.DynamoDBEvent](t, sfntest.Substitute(t, sample, f.vars))
		recA := streamRecord(t, ev, a.ID, "4421584500000000017450439091")
		recB := streamRecord(t, ev, b.ID, "4421584700000000017450439160")
		call := fanoutCall(t, f)
		step := func(what string, records []events.DynamoDBEventRecord, wantFailed []string, wantCalls int) {
			t.Helper()
			before := f.deliveryQueue(t).callCount()
			fails := streamFailures(call(events.DynamoDBEvent{Records: records}))
			if !slices.Equal(fails, wantFailed) {
				t.Errorf("%s: failures %v, want %v", what, fails, wantFailed)
			}
			if n := f.deliveryQueue(t).callCount() - before; n != wantCalls {
				t.Errorf("%s: %d SendMessageBatch calls, want %d", what, n, wantCalls)
			}
		}
		queuedOf := func(evt tally.Event) int {
			t.Helper()
			msgs, n := f.deliveryQueue(t).messages(t), 0
			for _, d := range f.deliveriesOf(t, evt.ID) {
				if slices.Contains(msgs, messageBody(f.brand.ID, d.ID)) {
					n++
				}
			}
			return n
		}

		f.deliveryQueue(t).refuseFrom(1, down)
		step("SendMessageBatch fails for the first record", []events.DynamoDBEventRecord{recA, recB}, []string{recA.Change.SequenceNumber}, 1)
		if n := queuedOf(b); n != 0 {
			t.Errorf("%d deliveries of the record after the failed one were queued", n)
		}
		f.deliveryQueue(t).refuseFrom(2, refuseLast)
		step("the last entry of the second call, B7, is refused", []events.DynamoDBEventRecord{recA, recB}, []string{recB.Change.SequenceNumber}, 2)
		f.deliveryQueue(t).refuseFrom(3, down)
		step("the third call, B's last four, fails", []events.DynamoDBEventRecord{recA, recB}, []string{recB.Change.SequenceNumber}, 3)
		f.deliveryQueue(t).refuseFrom(1, accept)
		step("the retry from the second record", []events.DynamoDBEventRecord{recB}, nil, 2)

		dsA, dsB := f.deliveriesOf(t, a.ID), f.deliveriesOf(t, b.ID)
		if len(dsA) != 12 || len(dsB) != 12 {
			t.Fatalf("%d and %d deliveries, want 12 per event", len(dsA), len(dsB))
		}
		// Every delivery was queued at least once; the retries queued some
		// twice, which deliver tolerates.
		msgs := f.deliveryQueue(t).messages(t)
		for _, d := range slices.Concat(slices.Collect(maps.Values(dsA)), slices.Collect(maps.Values(dsB))) {
			if !slices.Contains(msgs, messageBody(f.brand.ID, d.ID)) {
				t.Errorf("delivery %s was never queued", d.ID)
			}
		}
	})
}

// TestFanoutSampleIsTheStoredItem checks the stream sample against what the
// DynamoDB backend writes: the INSERT's image has the attributes (names and
// types) of a new event item, the MODIFY's those of the item after its
// fan-out.
func TestFanoutSampleIsTheStoredItem(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	f := newFixture(t, dynamo.New(client, table))
	evt := f.applied(t, "Runner Media")
	ev := decodeEvent[events.DynamoDBEvent](t, sfntest.Substitute(t, samples(t)["fanout-stream"], f.vars))
	item := func() map[string]ddbtypes.AttributeValue {
		out, err := client.GetItem(t.Context(), &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: map[string]ddbtypes.AttributeValue{"pk": &ddbtypes.AttributeValueMemberS{Value: "EVT#" + evt.ID}, "sk": &ddbtypes.AttributeValueMemberS{Value: "#EVT"}}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	compare := func(what string, image map[string]events.DynamoDBAttributeValue, stored map[string]ddbtypes.AttributeValue) {
		t.Helper()
		got, want := map[string]string{}, map[string]string{}
		for name, v := range image {
			got[name] = map[events.DynamoDBDataType]string{events.DataTypeString: "S", events.DataTypeBinary: "B", events.DataTypeNumber: "N"}[v.DataType()]
		}
		for name, v := range stored {
			want[name] = fmt.Sprintf("%T", v)[len("*types.AttributeValueMember"):]
			if s, ok := v.(*ddbtypes.AttributeValueMemberS); ok && name != "gsi1pk" && name != "gsi3pk" && image[name].DataType() == events.DataTypeString && image[name].String() != s.Value {
				t.Errorf("%s: %s = %q, the table has %q", what, name, image[name].String(), s.Value)
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: attributes %v, the table's item has %v", what, got, want)
		}
	}
	compare("INSERT", ev.Records[0].Change.NewImage, item())
	if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	compare("MODIFY", ev.Records[1].Change.NewImage, item())
	for _, rec := range ev.Records {
		if !maps.Equal(maps.Collect(func(yield func(string, string) bool) {
			for k, v := range rec.Change.Keys {
				yield(k, v.String())
			}
		}), map[string]string{"pk": "EVT#" + evt.ID, "sk": "#EVT"}) {
			t.Errorf("%s: Keys %v", rec.EventName, rec.Change.Keys)
		}
	}
}

// TestDeliverStartExecutionFails checks that a message whose attempt 1
// failed but whose execution could not be started is reported, and that
// SQS's redelivery starts it without sending again.
func TestDeliverStartExecutionFails(t *testing.T) {
	sample := samples(t)["deliver-sqs"]
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		sub := f.subscribe(t, []string{tally.EventPartnerApplied}, "", 500)
		evt := f.applied(t, "Runner Media")
		if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
			t.Fatal(err)
		}
		id := f.deliveriesOf(t, evt.ID)[sub.ID].ID
		f.vars["TALLY_DELIVERY_ID"], f.vars["TALLY_OTHER_DELIVERY_ID"] = id, id
		ev := decodeEvent[events.SQSEvent](t, sfntest.Substitute(t, sample, f.vars))
		ev.Records = ev.Records[:1]
		call := deliverCall(t, f)

		f.executions.err = &smithy.GenericAPIError{Code: "ThrottlingException", Message: "Rate exceeded"}
		if fails := queueFailures(call(ev)); !slices.Equal(fails, []string{ev.Records[0].MessageId}) {
			t.Errorf("failures %v, want the message", fails)
		}
		f.executions.err = nil
		if fails := queueFailures(call(ev)); len(fails) != 0 {
			t.Errorf("redelivered: failures %v", fails)
		}
		if got := f.executions.startedNames(); !slices.Equal(got, []string{id + "-0"}) {
			t.Errorf("executions %v, want [%s-0]", got, id)
		}
		if n := f.receivers[sub.ID].count(); n != 1 {
			t.Errorf("the receiver got %d requests, want attempt 1 once", n)
		}
	})
}

// TestRequeue checks the hook that queues a manually retried delivery.
func TestRequeue(t *testing.T) {
	q := newTestQueue(t)
	requeue := queue.Requeue(q.client, q.URL)
	ref := endpoints.DeliveryRef{BrandID: "brd_01kaqhzz2r4t6y8a0c2e4g6j8m", DeliveryID: "wh_01kaqj3f8v5m2w7x9c4d6e8g0h"}
	if err := requeue(t.Context(), ref); err != nil {
		t.Fatal(err)
	}
	if calls := q.sendCalls(); len(calls) != 1 || len(calls[0].Entries) != 1 || calls[0].QueueURL != q.URL {
		t.Fatalf("calls %+v, want one batch of one message to the queue", calls)
	}
	if got, want := q.messages(t), []string{messageBody(ref.BrandID, ref.DeliveryID)}; !slices.Equal(got, want) {
		t.Errorf("messages %q, want %q", got, want)
	}
	q.refuseFrom(1, refuseLast)
	if err := requeue(t.Context(), ref); err == nil {
		t.Error("a refused message is no error")
	}
	q.refuseFrom(1, down)
	if err := requeue(t.Context(), ref); err == nil {
		t.Error("a failed call is no error")
	}
	if got := q.messages(t); len(got) != 1 {
		t.Errorf("messages %q after the refusals, want still the one", got)
	}
}

// TestManualRetryRequeues checks POST /deliveries/{id}/retry through the
// deliveries function, whose service queues the retried delivery
// (queue.Requeue, as functions/deliveries wires it from TALLY_DELIVERY_QUEUE_URL):
// exactly one message, which deliver turns into attempt 1 of the new
// schedule and an execution named after that schedule.
func TestManualRetryRequeues(t *testing.T) {
	all := samples(t)
	groups := groupsOf(t, "deliveries")
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		q := newTestQueue(t)
		f := newFixture(t, st, service.WithRequeue(queue.Requeue(q.client, q.URL)))
		sub := f.subscribe(t, []string{tally.EventPartnerApplied}, webhookSecret, 500)
		evt := f.applied(t, "Runner Media")
		if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
			t.Fatal(err)
		}
		d := f.deliveriesOf(t, evt.ID)[sub.ID]
		ref := endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}
		for n := 1; n <= webhooks.MaxAttempts; n++ {
			if _, err := f.svc.Webhooks.Attempt(t.Context(), ref, n, f.sender); err != nil {
				t.Fatal(err)
			}
		}
		if d = f.delivery(t, d.ID); d.Status != tally.DeliveryFailed {
			t.Fatalf("setup: delivery %+v, want failed", d)
		}

		h := apiHandler(t, f, groups)
		ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, all["deliveries-list"], f.vars))
		path := "/api/v1/deliveries/" + d.ID + "/retry"
		ev.RouteKey, ev.RawPath, ev.RawQueryString = "POST /api/v1/deliveries/{id}/retry", path, ""
		ev.RequestContext.RouteKey, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = ev.RouteKey, "POST", path
		r := invokeAPI(t, f, h, ev)
		wantStatus(t, r, 200)
		wantField(t, r.body, "status", tally.DeliveryPending)
		// A second retry finds it pending: 409, and nothing more is queued.
		r = invokeAPI(t, f, h, ev)
		wantStatus(t, r, 409)
		msgs := sqstest.Receive(t, q.direct, q.Queue, 10, time.Second)
		if len(msgs) != 1 || msgs[0].Body != messageBody(f.brand.ID, d.ID) {
			t.Fatalf("queued %+v, want exactly one message for %s", msgs, d.ID)
		}

		// The message through deliver: attempt 1 of the new schedule, and
		// the execution for that schedule (cycle 7: seven attempts before).
		if fails := queueFailures(deliverCall(t, f)(events.SQSEvent{Records: msgs})); len(fails) != 0 {
			t.Fatalf("failures %v", fails)
		}
		if n := f.receivers[sub.ID].count(); n != webhooks.MaxAttempts+1 {
			t.Errorf("the receiver got %d requests, want %d", n, webhooks.MaxAttempts+1)
		}
		want := fmt.Sprintf("%s-%d", d.ID, webhooks.MaxAttempts)
		if got := f.executions.startedNames(); !slices.Equal(got, []string{want}) {
			t.Errorf("executions %v, want [%s]", got, want)
		}
		if d = f.delivery(t, d.ID); d.Status != tally.DeliveryPending || len(d.Attempts) != webhooks.MaxAttempts+1 {
			t.Errorf("delivery %+v, want pending with %d attempts", d, webhooks.MaxAttempts+1)
		}
	})
}

// TestReconcilerDefersToABacklog checks that overdue events and deliveries
// are not re-driven while the delivery queue has a backlog (deliver is
// behind, and their messages are most likely in it), and are once it is
// gone.
func TestReconcilerDefersToABacklog(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	f.fanOutAll(t)
	f.subscribe(t, []string{tally.EventPartnerApplied}, "")
	evt := f.applied(t, "Runner Media")
	if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
		t.Fatal(err)
	}
	dropped := f.applied(t, "Trail Tales")
	q := f.deliveryQueue(t)
	for _, id := range []string{"wh_01kaqj3f8v5m2w7x9c4d6e8g0h", "wh_01kaqj3f8v5m2w7x9c4d6e8g0j"} {
		if err := queue.Requeue(q.client, q.URL)(t.Context(), endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: id}); err != nil {
			t.Fatal(err)
		}
	}
	r := fanout.DefaultReconciler
	r.Backlog = 2
	h := r.Handler(f.svc.Webhooks, q.client, q.URL, f.cfg.Logger)
	f.clock.Add(time.Hour)
	res, err := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
	if err != nil || res.Events != 0 || res.Deliveries != 0 || !res.Deferred || res.Backlog != 2 {
		t.Errorf("with 2 messages waiting: %+v, %v; want the event and the overdue delivery deferred", res, err)
	}
	before := len(q.messages(t)) // deliver catches up
	res, err = h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
	if err != nil || res.Events != 1 || res.Deliveries != 1 || res.Deferred {
		t.Errorf("with the queue empty: %+v, %v; want the event fanned out and the overdue delivery queued", res, err)
	}
	d := f.deliveriesOf(t, evt.ID)[f.subs[0].ID]
	got := q.messages(t)[before:]
	if !slices.Contains(got, messageBody(f.brand.ID, d.ID)) {
		t.Errorf("queued %q, want the overdue delivery %s", got, d.ID)
	}
	if _, ok := plannedOf(t, got, dropped.ID); !ok {
		t.Errorf("queued %q, want the delivery of the dropped event %s", got, dropped.ID)
	}
}

// blindQueue is a delivery queue whose backlog cannot be read.
type blindQueue struct{ fanout.ReconcileQueue }

func (blindQueue) ApproximateNumberOfMessages(context.Context, string) (int, error) {
	return 0, errors.New("GetQueueAttributes: throttled")
}

// TestReconcilerRedrivesEventsWithoutTheBacklog checks that a run that
// cannot read the queue's backlog still re-drives an event whose message
// was lost (its deliveries exist nowhere else), reports the failure, and
// leaves overdue deliveries for a run that can read it.
func TestReconcilerRedrivesEventsWithoutTheBacklog(t *testing.T) {
	f := newFixture(t, testenv.Bolt(t))
	f.fanOutAll(t)
	f.subscribe(t, []string{tally.EventPartnerApplied}, "")
	dropped := f.applied(t, "Trail Tales")
	q := f.deliveryQueue(t)
	h := fanout.DefaultReconciler.Handler(f.svc.Webhooks, blindQueue{q.client}, q.URL, f.cfg.Logger)
	f.clock.Add(time.Hour)
	res, err := h(lambdaContext(t, "reconciler-invocation"), events.EventBridgeEvent{})
	if err == nil || res.Events != 1 || res.Deferred {
		t.Errorf("backlog unreadable: %+v, %v; want the event re-driven and the error reported", res, err)
	}
	if _, ok := plannedOf(t, q.messages(t), dropped.ID); !ok {
		t.Errorf("queued %q, want the delivery of the dropped event %s", q.messages(t), dropped.ID)
	}
}

// fanOutAll fans out every event of the fixture's brand so far.
func (f *fixture) fanOutAll(t *testing.T) {
	t.Helper()
	evts, _, err := f.svc.Events.Events(t.Context(), f.brand.ID, records.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evts {
		if _, err := f.svc.Webhooks.FanOut(t.Context(), e.ID); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeliverDuplicatesInABatch checks that two messages for the same
// delivery in one batch (queued twice: a repeated fan-out, a re-drive) make
// one attempt, not two at once.
func TestDeliverDuplicatesInABatch(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		sub := f.subscribe(t, []string{tally.EventPartnerApplied}, "", 503)
		evt := f.applied(t, "Runner Media")
		if _, err := f.svc.Webhooks.FanOut(t.Context(), evt.ID); err != nil {
			t.Fatal(err)
		}
		d := f.deliveriesOf(t, evt.ID)[sub.ID]
		q := f.deliveryQueue(t)
		for range 3 {
			if err := queue.Requeue(q.client, q.URL)(t.Context(), endpoints.DeliveryRef{BrandID: f.brand.ID, DeliveryID: d.ID}); err != nil {
				t.Fatal(err)
			}
		}
		msgs := sqstest.Receive(t, q.direct, q.Queue, 10, time.Second)
		if len(msgs) != 3 {
			t.Fatalf("%d messages, want 3", len(msgs))
		}
		if fails := queueFailures(deliverCall(t, f)(events.SQSEvent{Records: msgs})); len(fails) != 0 {
			t.Errorf("failures %v", fails)
		}
		if n := f.receivers[sub.ID].count(); n != 1 {
			t.Errorf("the receiver got %d requests, want attempt 1 once", n)
		}
		if got := f.executions.startedNames(); !slices.Equal(got, []string{d.ID + "-0"}) {
			t.Errorf("executions %v, want one", got)
		}
	})
}

// TestRecoverPostbackRequeues: on AWS the deliveries function serves the
// recover routes; recovering a partner's failed postback queues it again,
// and the deliver function then sends it, a GET of the same filled URL
// under the same id.
func TestRecoverPostbackRequeues(t *testing.T) {
	all := samples(t)
	groups := groupsOf(t, "deliveries")
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		q := newTestQueue(t)
		f := newFixture(t, st, service.WithRequeue(queue.Requeue(q.client, q.URL)))
		rcv := newReceiver(t, 500, 500, 500, 500, 500, 500, 500, 204)
		since := f.clock.Now()
		url := rcv.srv.URL + "/pb?c={conversion_id}"
		if _, err := f.svc.Endpoints.PutPostback(t.Context(), f.brand.ID, f.partner.ID, endpoints.PostbackInput{URL: &url}); err != nil {
			t.Fatal(err)
		}
		c := f.recordConversion(t, f.offer, "recover-1")
		evts, _, err := f.svc.Events.Events(t.Context(), f.brand.ID, records.ListParams{Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		refs, err := f.svc.Webhooks.FanOut(t.Context(), evts[0].ID)
		if err != nil || len(refs) != 1 {
			t.Fatalf("fan-out: %v, %v; want the postback's delivery", refs, err)
		}
		for n := 1; n <= webhooks.MaxAttempts; n++ {
			if _, err := f.svc.Webhooks.Attempt(t.Context(), refs[0], n, f.sender); err != nil {
				t.Fatal(err)
			}
		}

		h := apiHandler(t, f, groups)
		ev := decodeEvent[events.APIGatewayV2HTTPRequest](t, sfntest.Substitute(t, all["deliveries-list"], f.vars))
		path := "/api/v1/partners/" + f.partner.ID + "/postback/recover"
		ev.RouteKey, ev.RawPath, ev.RawQueryString = "POST /api/v1/partners/{id}/postback/recover", path, ""
		ev.RequestContext.RouteKey, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = ev.RouteKey, "POST", path
		ev.Headers["content-type"] = "application/json"
		ev.Body = fmt.Sprintf(`{"since":%q}`, since.Format(time.RFC3339Nano))
		r := invokeAPI(t, f, h, ev)
		wantStatus(t, r, 200)
		wantField(t, r.body, "recovered", 1)
		msgs := sqstest.Receive(t, q.direct, q.Queue, 10, time.Second)
		if len(msgs) != 1 || msgs[0].Body != messageBody(f.brand.ID, refs[0].DeliveryID) {
			t.Fatalf("queued %+v, want exactly one message for %s", msgs, refs[0].DeliveryID)
		}

		// The message through deliver: attempt 1 of the new schedule.
		if fails := queueFailures(deliverCall(t, f)(events.SQSEvent{Records: msgs})); len(fails) != 0 {
			t.Fatalf("failures %v", fails)
		}
		if rcv.count() != webhooks.MaxAttempts+1 {
			t.Fatalf("the partner got %d requests, want %d", rcv.count(), webhooks.MaxAttempts+1)
		}
		req, _ := rcv.request(webhooks.MaxAttempts)
		if req.Method != "GET" || req.URL.RequestURI() != "/pb?c="+c.ID || req.Header.Get("X-Tally-Webhook-Id") != refs[0].DeliveryID {
			t.Errorf("the recovered postback: %s %s id %q", req.Method, req.URL.RequestURI(), req.Header.Get("X-Tally-Webhook-Id"))
		}
		if d := f.delivery(t, refs[0].DeliveryID); d.Status != tally.DeliverySucceeded || d.Type != tally.DeliveryPostback {
			t.Errorf("delivery %+v, want a succeeded postback", d)
		}
	})
}
