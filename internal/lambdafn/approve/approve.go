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
	"github.com/tally-hq/tally/internal/app"
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
// invoke` prints).
type Result struct {
	Approved int `json:"approved"`
}

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
// scheduled event approves every pending conversion whose hold time has
// elapsed and logs how many. The event's content is not used beyond the
// log line, so an EventBridge rule's "Scheduled Event" and an EventBridge
// Scheduler target with any JSON object input both work.
//
// A failure returns an error, so that Lambda retries the asynchronous
// invocation; approving twice is safe, since each approval is conditional.
// Conversions approved before the failure are counted in the result.
func Handler(approver app.Approver, log *slog.Logger) Func {
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
		n, err := approver.ApproveDue(ctx)
		ms := time.Since(start).Milliseconds()
		if err != nil {
			l.Error("hold-time approval failed", "err", err.Error(), "approved", n, "durationMs", ms)
			return Result{Approved: n}, err
		}
		l.Info("hold-time approval", "approved", n, "durationMs", ms)
		return Result{Approved: n}, nil
	}
}
