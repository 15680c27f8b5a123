// Package queue sends to the delivery queue (SQS): the messages of
// deliveries to attempt, in fair batches by brand. The fan-out and the
// reconciler send through it, and so do the functions whose routes queue a
// delivery again (a manual retry, a recovery). Only they link the SQS
// client (internal/sqsjson).
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/tally-hq/tally/internal/awsenv"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/sqsjson"
)

// FromEnv is Requeue to the queue TALLY_DELIVERY_QUEUE_URL names, for a
// function whose routes queue deliveries again (api.WithRequeue).
func FromEnv(log *slog.Logger) endpoints.Requeue {
	return Requeue(NewClient(log), lambdafn.MustEnv(log, lambdafn.EnvDeliveryQueueURL))
}

// NewClient is the SQS client of the environment (internal/awsenv).
func NewClient(log *slog.Logger) *sqsjson.Client {
	cfg, err := awsenv.Config()
	if err != nil {
		lambdafn.Fatal(log, err)
	}
	return sqsjson.New(cfg, awsenv.Endpoint("SQS"))
}

// Queue is the part of the SQS client the fan-out uses (*sqsjson.Client).
type Queue interface {
	// SendBatch queues 1 to sqsjson.MaxBatch messages in one
	// SendMessageBatch call.
	SendBatch(ctx context.Context, queueURL string, msgs []sqsjson.Message) error
}

// SendRefs queues a message per ref (Send).
func SendRefs(ctx context.Context, q Queue, queueURL string, refs []endpoints.DeliveryRef) (int, error) {
	msgs := make([]Message, len(refs))
	for i, ref := range refs {
		msgs[i] = ref
	}
	return Send(ctx, q, queueURL, msgs)
}

// Message is what a queued delivery's message carries
// (webhooks.DeliveryMessage is one).
type Message interface{ Brand() string }

// Send queues the delivery messages, in batches. On an error it returns
// the index of the first it cannot say was queued.
func Send(ctx context.Context, q Queue, queueURL string, all []Message) (int, error) {
	for start := 0; start < len(all); start += sqsjson.MaxBatch {
		chunk := all[start:min(start+sqsjson.MaxBatch, len(all))]
		msgs := make([]sqsjson.Message, len(chunk))
		for i, m := range chunk {
			msgs[i] = sqsMessage(m, 0)
		}
		if err := q.SendBatch(ctx, queueURL, msgs); err != nil {
			first := 0
			var refused *sqsjson.Refused
			if errors.As(err, &refused) {
				first = len(chunk)
				for _, f := range refused.Failed {
					if i, convErr := strconv.Atoi(f.ID); convErr == nil {
						first = min(first, i)
					}
				}
			}
			return start + min(first, len(chunk)-1), fmt.Errorf("queue deliveries: %w", err)
		}
	}
	return len(all), nil
}

// SendLater queues the delivery message m to be received no sooner than
// delay from now (whole seconds, at most sqsjson.MaxDelay).
func SendLater(ctx context.Context, q Queue, queueURL string, m Message, delay time.Duration) error {
	if err := q.SendBatch(ctx, queueURL, []sqsjson.Message{sqsMessage(m, delay)}); err != nil {
		return fmt.Errorf("queue the delivery again: %w", err)
	}
	return nil
}

// sqsMessage is the queue's message of m, received after delay.
func sqsMessage(m Message, delay time.Duration) sqsjson.Message {
	body, _ := json.Marshal(m) // strings and a record always marshal
	// The brand is the message group: with the queue a fair queue, one
	// brand's backlog or slow receivers do not hold up the others'
	// deliveries (docs/aws.md, "Fair delivery").
	return sqsjson.Message{Body: string(body), Group: m.Brand(), Delay: delay}
}

// Requeue returns the endpoints.Requeue that queues a manually
// retried delivery.
func Requeue(q Queue, queueURL string) func(context.Context, endpoints.DeliveryRef) error {
	return func(ctx context.Context, ref endpoints.DeliveryRef) error {
		if _, err := SendRefs(ctx, q, queueURL, []endpoints.DeliveryRef{ref}); err != nil {
			return fmt.Errorf("queue the retried delivery: %w", err)
		}
		return nil
	}
}
