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
// once however Lambda retries or bisects the batch. A failure returns an error,
// and Lambda retries the batch; the window's state is not used (an empty
// one is returned: Lambda takes a response without state as a failure).
func Handler(rollups *reports.Service, log *slog.Logger) Func {
	return func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
		resp := events.DynamoDBTimeWindowEventResponse{TimeWindowEventResponseProperties: events.TimeWindowEventResponseProperties{State: map[string]string{}}}
		if len(ev.Records) == 0 {
			return resp, nil // a window's final invocation may carry nothing
		}
		if ev.ShardID == "" {
			return resp, errors.New("the batch names no shard: the rollup function's event source mapping needs a tumbling window (TumblingWindowInSeconds)")
		}
		changes := make([]reports.StreamChange, len(ev.Records))
		for i, rec := range ev.Records {
			it, err := lambdafn.StreamItem(rec.Change.NewImage)
			if err != nil {
				return resp, fmt.Errorf("stream record %s: %w", rec.Change.SequenceNumber, err)
			}
			changes[i] = reports.StreamChange{Seq: rec.Change.SequenceNumber, Item: it}
		}
		// The shard is named by its stream too: a stream created again has
		// shards of its own.
		if err := rollups.RollUp(ctx, ev.Records[0].EventSourceArn+"#"+ev.ShardID, changes); err != nil {
			log.Error("rollup failed", "shard", ev.ShardID, "records", len(ev.Records), "err", err.Error())
			return resp, err
		}
		return resp, nil
	}
}
