package lambdafn

// StreamFilterPatterns are the filters of the fan-out's event source
// mapping on the table's stream (FilterCriteria in template.yaml and
// infra/; a record passes when one matches): inserted event items, whose
// partition key starts with "EVT#", but those the fan-out makes itself
// (they name their conversion's outbox entry), and inserted conversions
// whose event the fan-out makes (service.WithStreamConversions marks them). Only those
// reach FanoutHandler. internal/deploy's test checks the template against
// them and against the keys tracking writes.
var StreamFilterPatterns = []string{
	`{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"EVT#"}]}},"NewImage":{"outbox":{"S":[{"exists":false}]}}}}`,
	`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"fanout":{"S":["stream"]}}}}`,
}
