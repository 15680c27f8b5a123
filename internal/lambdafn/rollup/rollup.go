// Package rollup runs the function that adds the table stream's new
// conversions and clicks to the reports' rollups.
package rollup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/reports"
)

// Serve runs the function that adds new conversions and clicks to the
// report rollups from the table's stream. It never returns.
func Serve() {
	log := lambdafn.Logger()
	db, _ := lambdafn.Start(log)
	lambda.Start(Handler(reports.New(db, time.LoadLocation), log))
}

// Func is a Lambda handler for a DynamoDB stream with a tumbling
// window: the window is there for the shard id it adds to each batch, which
// the checkpoint of reports.Service.RollUp is kept per.
type Func func(context.Context, events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error)

// Handler returns the rollup function's handler: it adds the batch's
// conversions and clicks to the rollups (reports.Service.RollUp), exactly
// once however Lambda retries or bisects the batch. A record that cannot
// be read is a batch item failure, alone: the others are added, Lambda
// retries from it (what it already added is skipped) and, once the
// mapping's retries are spent, sends it to its on-failure destination
// instead of holding the shard. Any other failure returns an error, and
// Lambda retries the batch. The window's state is not used (an empty one
// is returned: Lambda takes a response without state as a failure).
func Handler(rollups *reports.Service, log *slog.Logger) Func {
	return func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
		resp := events.DynamoDBTimeWindowEventResponse{TimeWindowEventResponseProperties: events.TimeWindowEventResponseProperties{State: map[string]string{}}}
		if len(ev.Records) == 0 {
			return resp, nil // a window's final invocation may carry nothing
		}
		if ev.ShardID == "" {
			return resp, errors.New("the batch names no shard: the rollup function's event source mapping needs a tumbling window (TumblingWindowInSeconds)")
		}
		fail := func(seq string, err error) {
			log.Error("rollup: stream record cannot be read", "shard", ev.ShardID, "seq", seq, "err", err.Error())
			resp.BatchItemFailures = append(resp.BatchItemFailures, events.DynamoDBBatchItemFailure{ItemIdentifier: seq})
		}
		changes := make([]reports.StreamChange, 0, len(ev.Records))
		for _, rec := range ev.Records {
			it, err := lambdafn.StreamItem(rec.Change.NewImage)
			if err != nil {
				fail(rec.Change.SequenceNumber, err)
				continue
			}
			changes = append(changes, reports.StreamChange{Seq: rec.Change.SequenceNumber, Item: it})
		}
		// The shard is named by its stream too: a stream created again has
		// shards of its own.
		err := rollups.RollUp(ctx, ev.Records[0].EventSourceArn+"#"+ev.ShardID, changes)
		var unreadable *reports.UnreadableChangesError
		switch {
		case errors.As(err, &unreadable):
			for i, seq := range unreadable.Seqs {
				fail(seq, unreadable.Errs[i])
			}
		case err != nil:
			log.Error("rollup failed", "shard", ev.ShardID, "records", len(ev.Records), "err", err.Error())
			return resp, fmt.Errorf("roll up: %w", err)
		}
		return resp, nil
	}
}
