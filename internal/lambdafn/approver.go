package lambdafn

import (
	"context"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/tally-hq/tally/internal/service"
)

// ApproverResult is what the approver function returns (and `sam local
// invoke` prints).
type ApproverResult struct {
	Approved int `json:"approved"`
}

// ApproverFunc is a Lambda handler for EventBridge scheduled events.
type ApproverFunc func(context.Context, events.EventBridgeEvent) (ApproverResult, error)

// ApproverHandler returns the handler of the hold-time approval job: each
// scheduled event approves every pending conversion whose hold time has
// elapsed and logs how many. The event's content is not used beyond the
// log line, so an EventBridge rule's "Scheduled Event" and an EventBridge
// Scheduler target with any JSON object input both work.
//
// A failure returns an error, so that Lambda retries the asynchronous
// invocation; approving twice is safe, since each approval is conditional.
// Conversions approved before the failure are counted in the result.
func ApproverHandler(svc *service.Service, log *slog.Logger) ApproverFunc {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) (ApproverResult, error) {
		l := log
		if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
			l = l.With("awsRequestId", lc.AwsRequestID)
		}
		if ev.ID != "" {
			l = l.With("eventId", ev.ID)
		}
		start := time.Now()
		n, err := svc.Conversions.ApproveDue(ctx)
		ms := time.Since(start).Milliseconds()
		if err != nil {
			l.Error("hold-time approval failed", "err", err.Error(), "approved", n, "durationMs", ms)
			return ApproverResult{Approved: n}, err
		}
		l.Info("hold-time approval", "approved", n, "durationMs", ms)
		return ApproverResult{Approved: n}, nil
	}
}
