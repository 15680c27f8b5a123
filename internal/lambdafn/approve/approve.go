// Package approve runs the scheduled function that approves pending
// conversions whose hold time has passed.
package approve

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/reports"
)

// Result is what the approver function returns (and `sam local
// invoke` prints): conversions.ApprovalRun.
type Result struct {
	Approved   int `json:"approved"`
	Unfinished int `json:"unfinished"`
	Busy       int `json:"busy"`
}

// Approver approves pending conversions whose hold time has passed, until
// a deadline (conversions.Service).
type Approver interface {
	ApproveDueBy(ctx context.Context, deadline time.Time) (conversions.ApprovalRun, error)
}

// stopBefore is how long before the invocation's deadline a run starts no
// further page: a page's approvals take well under a second.
const stopBefore = 10 * time.Second

// Serve runs the scheduled function that approves pending conversions
// whose hold time has elapsed. It never returns.
func Serve() {
	log := lambdafn.Logger()
	db, settings := lambdafn.Start(log)
	w := outbox.NewWriter(db, settings.DeliveryRetention, outbox.EveryEvent{}, nil)
	o := offers.New(db, cacheTTL)
	p := partners.New(db, w, identity.New(db, cacheTTL))
	lambda.Start(Handler(conversions.New(db, w, o, p, reports.FromStream{}, conversions.ForStream{}, emf.New(os.Stdout)), log))
}

// cacheTTL is how long the function trusts the offers it read.
const cacheTTL = 30 * time.Second

// Func is a Lambda handler for EventBridge scheduled events.
type Func func(context.Context, events.EventBridgeEvent) (Result, error)

// Handler returns the handler of the hold-time approval job: each
// scheduled event approves pending conversions whose hold time has
// elapsed, until stopBefore the invocation's deadline (lambdafn.StopAt),
// and logs how many.
// A run that leaves shards unfinished says so (WARN); the runs that start
// every minute while it works take the other shards, so a backlog is
// worked by several runs at once (docs/aws.md, "Capacity"). The event's
// content is not used beyond the log line, so an EventBridge rule's
// "Scheduled Event" and an EventBridge Scheduler target with any JSON
// object input both work.
//
// A failure returns an error, so that Lambda retries the asynchronous
// invocation; approving twice is safe, since each approval is conditional.
// Conversions approved before the failure are counted in the result.
func Handler(approver Approver, log *slog.Logger) Func {
	if log == nil {
		log = slog.Default()
	}
	return func(ctx context.Context, ev events.EventBridgeEvent) (Result, error) {
		l := log
		if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
			l = l.With("awsRequestId", lc.AwsRequestID)
		}
		if ev.ID != "" {
			l = l.With("eventId", ev.ID)
		}
		start := time.Now()
		run, err := approver.ApproveDueBy(ctx, lambdafn.StopAt(ctx, stopBefore))
		res := Result(run)
		attrs := []any{"approved", run.Approved, "unfinished", run.Unfinished, "busy", run.Busy, "durationMs", time.Since(start).Milliseconds()}
		switch {
		case err != nil:
			l.Error("hold-time approval failed", append(attrs, "err", err.Error())...)
			return res, err
		case run.Unfinished > 0:
			l.Warn("hold-time approval left due conversions for the next runs", attrs...)
		default:
			l.Info("hold-time approval", attrs...)
		}
		return res, nil
	}
}
