// Package deliver runs the function behind the delivery queue: it makes
// attempt 1 of each delivery and starts the retry workflow (Step
// Functions) for the ones that failed, whose task (package attempt) makes
// the retries. Only it links the Step Functions client.
//
// The webhook pipeline on AWS: DynamoDB Streams → fanout → SQS → deliver
// (attempt 1) → a Step Functions execution whose task, attempt, makes the
// retries. Each stage may repeat, and each step it runs is idempotent. The
// steps that queue (fan-out, reconciler) are in package lambdafn/fanout and
// send through lambdafn/queue, as a manual retry does, so that each
// function links only the AWS clients it calls.
package deliver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	sfntypes "github.com/aws/aws-sdk-go-v2/service/sfn/types"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/awsenv"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/webhooks"
)

// ServeDeliver runs the function behind the delivery queue. It never returns.
func ServeDeliver() {
	log := lambdafn.Logger()
	// A batch's attempts are counted in one EMF line per outcome.
	metrics := emf.New(os.Stdout)
	engine := attempt.Engine(log, metrics)
	cfg, err := awsenv.Config()
	if err != nil {
		lambdafn.Fatal(log, err)
	}
	client := sfn.NewFromConfig(cfg, func(o *sfn.Options) { o.BaseEndpoint = awsenv.Endpoint("SFN") })
	later := Later(queue.NewClient(log), lambdafn.MustEnv(log, lambdafn.EnvDeliveryQueueURL))
	lambda.Start(emf.PerInvocation(metrics, DeliverHandler(engine, attempt.CloudSender(), client, lambdafn.MustEnv(log, lambdafn.EnvRetryStateMachineARN), later, log)))
}

// Requeue queues a delivery message again, to be received after a delay:
// a paced delivery's turn.
type Requeue func(ctx context.Context, msg webhooks.DeliveryMessage, delay time.Duration) error

// Later is the Requeue that sends to the delivery queue at queueURL.
func Later(q queue.Queue, queueURL string) Requeue {
	return func(ctx context.Context, msg webhooks.DeliveryMessage, delay time.Duration) error {
		return queue.SendLater(ctx, q, queueURL, msg, delay)
	}
}

// paceDelay is how long a paced message waits in the queue: until its
// turn (next: the next second, spread over it), in the whole seconds SQS
// delays by, and 0 to 3 seconds more the more often it has waited (a
// spread of 1, 2, then 4 seconds), so that a backlog of more than a
// second's pace comes back spread over the seconds after, not all at each
// second's start to be refused again. A wider spread would cost a large
// backlog fewer returns, but leave a small one's last seconds idle
// (docs/aws.md, "Per-endpoint pace").
func paceDelay(next, now time.Time, waited int) time.Duration {
	d := max(next.Sub(now), time.Second)
	spread := 1 << min(waited, 2)
	return (d + time.Second - 1).Truncate(time.Second) + time.Duration(rand.IntN(spread))*time.Second
}

// Executions is the part of the Step Functions client deliver uses.
type Executions interface {
	StartExecution(ctx context.Context, in *sfn.StartExecutionInput, optFns ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error)
	DescribeExecution(ctx context.Context, in *sfn.DescribeExecutionInput, optFns ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error)
}

// maxRestarts bounds how many times deliver restarts a schedule whose
// executions ended without deciding the delivery (timed out, aborted, or
// failed before marking it); then it marks the delivery failed.
const maxRestarts = 3

// DeliverHandler handles a batch of the delivery queue: for each message it
// makes attempt 1 and, when that fails, starts the retry state machine. The
// execution is named after the delivery (and its schedule), so a repeated
// message cannot start a second one; a repeated attempt 1 sends nothing.
// A message for a delivery that is still pending although the execution of
// its schedule has ended (the reconciler re-drives such deliveries) restarts
// the schedule under a new name, at the attempt that is next; after
// maxRestarts the delivery is marked failed instead. Failed messages are
// reported (partial batch response) and retried by SQS, then go to the
// dead-letter queue. The order of the reported failures is not the order of
// the batch. A message whose delivery's endpoint has used up its pace for
// this second (webhooks.AttemptResult.Paced: no attempt made) is queued
// again with a delay (later) and counts as handled: the rest of the batch
// does not wait for it, and its wait is not an attempt. Should the
// function end before that send, SQS gives the message again.
func DeliverHandler(engine *webhooks.Engine, sender webhooks.Sender, ex Executions, stateMachineARN string, later Requeue, log *slog.Logger) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		// The messages are attempted at once, so a batch takes as long as its
		// slowest receiver (at most the 10 s limit), not the sum of them.
		// Messages for the same delivery (queued twice: a repeated fan-out,
		// a re-drive; their bodies may differ in the planned delivery's
		// times) are one step, or both would make attempt 1.
		var (
			resp  events.SQSEventResponse
			mu    sync.Mutex
			wg    sync.WaitGroup
			ids   = map[string][]string{} // message ids by delivery
			first = map[string]string{}   // the first body of each delivery
			order []string
		)
		for _, msg := range ev.Records {
			key := msg.Body
			var ref endpoints.DeliveryRef
			if json.Unmarshal([]byte(msg.Body), &ref) == nil && ref.DeliveryID != "" {
				key = ref.BrandID + "/" + ref.DeliveryID
			}
			if ids[key] == nil {
				order, first[key] = append(order, key), msg.Body
			}
			ids[key] = append(ids[key], msg.MessageId)
		}
		for _, key := range order {
			wg.Go(func() {
				if err := deliver(ctx, engine, sender, ex, stateMachineARN, later, first[key]); err != nil {
					log.Error("delivery failed", "messageIds", ids[key], "err", err.Error())
					mu.Lock()
					for _, id := range ids[key] {
						resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: id})
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		return resp, nil
	}
}

func deliver(ctx context.Context, engine *webhooks.Engine, sender webhooks.Sender, ex Executions, stateMachineARN string, later Requeue, body string) error {
	var msg webhooks.DeliveryMessage
	if err := json.Unmarshal([]byte(body), &msg); err != nil || msg.BrandID == "" || msg.DeliveryID == "" {
		return fmt.Errorf("not a delivery message: %q", body)
	}
	res, err := engine.FirstAttempt(ctx, msg, sender)
	if err == nil && res.Paced {
		delay := paceDelay(res.NextAttemptAt.Time, engine.Now(), msg.Waited)
		msg.Waited++
		return later(ctx, msg, delay)
	}
	if err != nil || res.Status != tally.DeliveryPending || res.Parked {
		return err
	}
	return startRetries(ctx, engine, ex, stateMachineARN, msg.DeliveryRef, res)
}

// startRetries makes sure an execution runs the delivery's schedule: it
// starts one named <delivery>-<cycle>; if that name is taken by an
// execution that has ended, the delivery being still pending, it starts
// <delivery>-<cycle>-r1 (then r2, …) at the next attempt. A name taken by a
// running execution means the retries are under way. Names make the starts
// idempotent: a repeated message finds its execution.
func startRetries(ctx context.Context, engine *webhooks.Engine, ex Executions, stateMachineARN string, ref endpoints.DeliveryRef, res webhooks.AttemptResult) error {
	for restart := 0; restart <= maxRestarts; restart++ {
		in := attempt.RetryInput{DeliveryRef: ref, NextAttemptAt: res.NextAttemptAt}
		name := fmt.Sprintf("%s-%d", ref.DeliveryID, res.Cycle)
		if restart > 0 {
			d, err := engine.Delivery(ctx, ref)
			if err != nil {
				return err
			}
			if d.Status != tally.DeliveryPending || d.NextAttemptAt == nil {
				return nil // decided meanwhile
			}
			name = fmt.Sprintf("%s-r%d", name, restart)
			in.Attempt, in.ResumeAt, in.NextAttemptAt = res.Attempts+1, d.NextAttemptAt, nil
		}
		input, _ := json.Marshal(in)
		_, err := ex.StartExecution(ctx, &sfn.StartExecutionInput{
			StateMachineArn: aws.String(stateMachineARN),
			Name:            aws.String(name),
			Input:           aws.String(string(input)),
		})
		var exists *sfntypes.ExecutionAlreadyExists
		if !errors.As(err, &exists) {
			return err
		}
		out, err := ex.DescribeExecution(ctx, &sfn.DescribeExecutionInput{ExecutionArn: aws.String(executionARN(stateMachineARN, name))})
		if err != nil {
			return err
		}
		if out.Status == sfntypes.ExecutionStatusRunning || out.Status == sfntypes.ExecutionStatusPendingRedrive {
			return nil // a repeated message: the retries are under way
		}
	}
	_, err := engine.AbandonDelivery(ctx, ref)
	return err
}

// executionARN is the ARN of the state machine's execution name.
func executionARN(stateMachineARN, name string) string {
	return strings.Replace(stateMachineARN, ":stateMachine:", ":execution:", 1) + ":" + name
}
