package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
)

// RollupFilterPattern is the filter of the rollup function's event source
// mapping: only inserted conversions and clicks whose rollups are left to
// the stream (service.WithStreamRollups marks them) reach RollupHandler.
// internal/deploy's test checks the template against it.
const RollupFilterPattern = `{"eventName":["INSERT"],"dynamodb":{"NewImage":{"rollup":{"S":["stream"]}}}}`

// ServeRollup runs the function that adds new conversions and clicks to the
// report rollups from the table's stream. It never returns.
func ServeRollup() {
	log, svc := Start()
	lambda.Start(RollupHandler(svc, log))
}

// RollupFunc is a Lambda handler for a DynamoDB stream with a tumbling
// window: the window is there for the shard id it adds to each batch, which
// the checkpoint of service.Service.RollUp is kept per.
type RollupFunc func(context.Context, events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error)

// RollupHandler returns the rollup function's handler: it adds the batch's
// conversions and clicks to the rollups (service.Service.RollUp), exactly
// once however Lambda retries or bisects the batch. A failure returns an error,
// and Lambda retries the batch; the window's state is not used (an empty
// one is returned: Lambda takes a response without state as a failure).
func RollupHandler(svc *service.Service, log *slog.Logger) RollupFunc {
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
			it, err := StreamItem(rec.Change.NewImage)
			if err != nil {
				return resp, fmt.Errorf("stream record %s: %w", rec.Change.SequenceNumber, err)
			}
			changes[i] = reports.StreamChange{Seq: rec.Change.SequenceNumber, Item: it}
		}
		// The shard is named by its stream too: a stream created again has
		// shards of its own.
		if err := svc.Reports.RollUp(ctx, ev.Records[0].EventSourceArn+"#"+ev.ShardID, changes); err != nil {
			log.Error("rollup failed", "shard", ev.ShardID, "records", len(ev.Records), "err", err.Error())
			return resp, err
		}
		return resp, nil
	}
}

// StreamItem reads what tracking reads of a stream record's new image: the
// keys, the string attributes and the data.
func StreamItem(image map[string]events.DynamoDBAttributeValue) (it store.Item, err error) {
	defer func() {
		if r := recover(); r != nil { // the events package panics on a value of another type
			err = fmt.Errorf("new image: %v", r)
		}
	}()
	for name, v := range image {
		switch {
		case name == "pk":
			it.PK = v.String()
		case name == "sk":
			it.SK = v.String()
		case name == "data":
			it.Data = v.Binary()
		case v.DataType() == events.DataTypeString:
			if it.Attrs == nil {
				it.Attrs = map[string]string{}
			}
			it.Attrs[name] = v.String()
		}
	}
	if it.PK == "" || it.SK == "" || it.Data == nil {
		return it, errors.New("new image: no pk, sk or data")
	}
	return it, nil
}
