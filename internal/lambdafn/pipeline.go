package lambdafn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tally-hq/tally/internal/tracking"
)

// The webhook pipeline on AWS: DynamoDB Streams → fanout → SQS → deliver
// (attempt 1) → a Step Functions execution whose task, attempt, makes the
// retries. Each stage may repeat, and each step it runs is idempotent.

// Queue is the part of the SQS client the fan-out uses.
type Queue interface {
	SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// Executions is the part of the Step Functions client deliver uses.
type Executions interface {
	StartExecution(ctx context.Context, in *sfn.StartExecutionInput, optFns ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
}

// sqsBatch is SendMessageBatch's most entries per call.
const sqsBatch = 10

// FanoutHandler handles a DynamoDB Streams batch: for each new event item it
// makes the event's deliveries and queues one message per pending delivery.
// The event source mapping's filter lets only event inserts through; other
// records are skipped all the same. A record that fails is reported (partial
// batch response) and the rest of the batch is left for the retry, which
// starts at that record: repeating a fan-out creates nothing twice.
func FanoutHandler(svc *tracking.Service, q Queue, queueURL string, log *slog.Logger) func(context.Context, events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
	return func(ctx context.Context, ev events.DynamoDBEvent) (events.DynamoDBEventResponse, error) {
		var resp events.DynamoDBEventResponse
		for _, rec := range ev.Records {
			eventID, ok := insertedEvent(rec)
			if !ok {
				continue
			}
			if err := fanOut(ctx, svc, q, queueURL, eventID); err != nil {
				log.Error("fan-out failed", "eventId", eventID, "err", err.Error())
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: rec.Change.SequenceNumber})
				return resp, nil
			}
		}
		return resp, nil
	}
}

// insertedEvent returns the event id of a stream record that inserts an
// event item.
func insertedEvent(rec events.DynamoDBEventRecord) (string, bool) {
	if rec.EventName != string(events.DynamoDBOperationTypeInsert) {
		return "", false
	}
	pk, ok := rec.Change.Keys["pk"]
	if !ok || pk.DataType() != events.DataTypeString {
		return "", false
	}
	return strings.CutPrefix(pk.String(), "EVT#")
}

func fanOut(ctx context.Context, svc *tracking.Service, q Queue, queueURL, eventID string) error {
	refs, err := svc.FanOut(ctx, eventID)
	if err != nil {
		return err
	}
	for len(refs) > 0 {
		chunk := refs[:min(sqsBatch, len(refs))]
		refs = refs[len(chunk):]
		in := &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL)}
		for i, ref := range chunk {
			body, _ := json.Marshal(ref) // two strings always marshal
			in.Entries = append(in.Entries, sqstypes.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(body))})
		}
		out, err := q.SendMessageBatch(ctx, in)
		if err != nil {
			return fmt.Errorf("queue deliveries: %w", err)
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("queue deliveries: %d of %d messages refused, first: %s", len(out.Failed), len(chunk), aws.ToString(out.Failed[0].Message))
		}
	}
	return nil
}

// Requeue returns the tracking.WithRequeue hook that queues a manually
// retried delivery.
func Requeue(q Queue, queueURL string) func(context.Context, tracking.DeliveryRef) error {
	return func(ctx context.Context, ref tracking.DeliveryRef) error {
		body, _ := json.Marshal(ref)
		out, err := q.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queueURL),
			Entries: []sqstypes.SendMessageBatchRequestEntry{{Id: aws.String("0"), MessageBody: aws.String(string(body))}}})
		if err == nil && len(out.Failed) > 0 {
			err = errors.New(aws.ToString(out.Failed[0].Message))
		}
		if err != nil {
			return fmt.Errorf("queue the retried delivery: %w", err)
		}
		return nil
	}
}

// RetryInput is the input of a retry execution and of each attempt task.
type RetryInput struct {
	tracking.DeliveryRef
	Attempt int `json:"attempt,omitempty"` // set by the state machine for each task
}

// DeliverHandler handles a batch of the delivery queue: for each message it
// makes attempt 1 and, when that fails, starts the retry state machine. The
// execution is named after the delivery (and its schedule), so a repeated
// message cannot start a second one; a repeated attempt 1 sends nothing.
// Failed messages are reported (partial batch response) and retried by SQS,
// then go to the dead-letter queue. The order of the reported failures is
// not the order of the batch.
func DeliverHandler(svc *tracking.Service, sender tracking.Sender, ex Executions, stateMachineARN string, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		// The messages are attempted at once, so a batch takes as long as its
		// slowest receiver (at most the 10 s limit), not the sum of them.
		var (
			resp events.SQSEventResponse
			mu   sync.Mutex
			wg   sync.WaitGroup
		)
		for _, msg := range ev.Records {
			wg.Go(func() {
				if err := deliver(ctx, svc, sender, ex, stateMachineARN, msg.Body); err != nil {
					log.Error("delivery failed", "messageId", msg.MessageId, "err", err.Error())
					mu.Lock()
					resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return resp, nil
	}
}

func deliver(ctx context.Context, svc *tracking.Service, sender tracking.Sender, ex Executions, stateMachineARN, body string) error {
	var ref tracking.DeliveryRef
	if err := json.Unmarshal([]byte(body), &ref); err != nil || ref.BrandID == "" || ref.DeliveryID == "" {
		return fmt.Errorf("not a delivery message: %q", body)
	}
	res, err := svc.Attempt(ctx, ref, 1, sender)
	if err != nil || res.Status != "pending" {
		return err
	}
	input, _ := json.Marshal(RetryInput{DeliveryRef: ref})
	_, err = ex.StartExecution(ctx, &sfn.StartExecutionInput{
		StateMachineArn: aws.String(stateMachineARN),
		Name:            aws.String(fmt.Sprintf("%s-%d", ref.DeliveryID, res.Cycle)),
		Input:           aws.String(string(input)),
	})
	var exists *sfntypes.ExecutionAlreadyExists
	if errors.As(err, &exists) {
		return nil // a repeated message: the retries are under way
	}
	return err
}

// AttemptHandler is the state machine's task: it makes attempt n of a
// delivery and says what follows (status pending: wait and go on).
func AttemptHandler(svc *tracking.Service, sender tracking.Sender) func(context.Context, RetryInput) (tracking.AttemptResult, error) {
	return func(ctx context.Context, in RetryInput) (tracking.AttemptResult, error) {
		return svc.Attempt(ctx, in.DeliveryRef, in.Attempt, sender)
	}
}
