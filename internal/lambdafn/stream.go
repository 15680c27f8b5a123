package lambdafn

import (
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// StreamFilterPatterns are the filters of the fan-out's event source
// mapping on the table's stream (FilterCriteria in template.yaml and
// infra/; a record passes when one matches): inserted event items, whose
// partition key starts with "EVT#", but conversion.created items the
// fan-out wrote itself (they name their conversion's outbox entry; it
// writes none now, and a stack deployed before has them), and inserted conversions
// whose event the fan-out makes (conversions.ForStream marks them). Only those
// reach the fan-out (fanout.Handler). internal/deploy's test checks the template against
// them and against the keys the services write.
var StreamFilterPatterns = []string{
	`{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"EVT#"}]}},"NewImage":{"outbox":{"S":[{"exists":false}]}}}}`,
	`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"fanout":{"S":["stream"]}}}}`,
}

// RollupFilterPattern is the filter of the rollup function's event source
// mapping: only inserted conversions and clicks whose rollups are left to
// the stream (reports.FromStream marks them) reach rollup.Handler.
// internal/deploy's test checks the template against it.
const RollupFilterPattern = `{"eventName":["INSERT"],"dynamodb":{"NewImage":{"rollup":{"S":["stream"]}}}}`

// StreamItem reads what the services read of a stream record's new image: the
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
			if it.Data, err = dynamo.UnpackData(v.Binary()); err != nil {
				return it, err
			}
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
