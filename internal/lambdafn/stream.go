package lambdafn

// StreamFilterPattern is the filter of the fan-out's event source mapping
// on the table's stream (FilterCriteria in template.yaml and infra/): only
// inserted event items, whose partition key starts with "EVT#", reach
// FanoutHandler. internal/deploy's test checks the template against it and
// against the keys tracking writes.
const StreamFilterPattern = `{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"EVT#"}]}}}}`
