package lambdafn

import (
	"context"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/webhooks"
)

// The webhook pipeline on AWS: DynamoDB Streams → fanout → SQS → deliver
// (attempt 1) → a Step Functions execution whose task, attempt, makes the
// retries. Each stage may repeat, and each step it runs is idempotent. The
// steps that queue (fan-out, reconciler, manual retry) are in package
// lambdafn/queue, deliver in lambdafn/deliver, so that each function links
// only the AWS clients it calls.

// RetryInput is the input of a retry execution and of each attempt task.
type RetryInput struct {
	endpoints.DeliveryRef
	// Attempt is set by the state machine for each attempt task, and in a
	// restarted execution's input: the attempt it resumes at.
	Attempt int `json:"attempt,omitempty"`
	// ResumeAt is when a restarted execution makes that attempt.
	ResumeAt *tally.Time `json:"resumeAt,omitempty"`
	// Abandon is set by the state machine's Catch: mark the delivery failed.
	Abandon bool `json:"abandon,omitempty"`
}

// AttemptHandler is the state machine's task: it makes attempt n of a
// delivery and says what follows (status pending: wait and go on), or, for
// the Catch's task, marks the delivery failed.
func AttemptHandler(svc *service.Service, sender webhooks.Sender) func(context.Context, RetryInput) (webhooks.AttemptResult, error) {
	return func(ctx context.Context, in RetryInput) (webhooks.AttemptResult, error) {
		if in.Abandon {
			return svc.Webhooks.AbandonDelivery(ctx, in.DeliveryRef)
		}
		return svc.Webhooks.Attempt(ctx, in.DeliveryRef, in.Attempt, sender)
	}
}
