package main

// The AWS layout of docs/aws.md, as data: one entry per Lambda function.
// template.yaml (SAM) implements the same contract; parity_test.go compares
// the two.

// kind says what drives a function.
type kind int

const (
	apiFunction      kind = iota // HTTP API routes
	approverFunction             // EventBridge schedule
	fanoutFunction               // the table's stream
	deliverFunction              // the delivery queue
	attemptFunction              // the retry state machine
	fallbackFunction             // the HTTP API's $default route: what no route matches
)

// function is one Lambda function: its logical id, its folder under
// functions/ (and bin/, where `make build` puts its bootstrap), its timeout
// in seconds and, for API functions, its routes ("METHOD /path"). The
// fallback has none of its own: it is the API's $default route, which
// answers what no other route matches in the API's error shape, and it has
// no access to the table.
type function struct {
	ID      string
	Dir     string
	Timeout float64
	Kind    kind
	Routes  []string
}

// memorySize is every function's memory, in MB.
const memorySize = 256

// Environment variable names the functions read (internal/lambdafn).
const (
	envTable                = "TALLY_TABLE"
	envDeliveryQueueURL     = "TALLY_DELIVERY_QUEUE_URL"
	envRetryStateMachineARN = "TALLY_RETRY_STATE_MACHINE_ARN"
	envRateLimit            = "TALLY_RATE_LIMIT"
	envApplicationRateLimit = "TALLY_APPLICATION_RATE_LIMIT"
)

// approverSchedule is the approver's EventBridge schedule expression.
const approverSchedule = "rate(1 minute)"

// fanoutFilter is the stream filter: only inserted event items (outbox).
const fanoutFilter = `{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"EVT#"}]}}}}`

// rateCounterKeys is the partition-key pattern of the rate-limit counters,
// the only items read-only functions may update.
const rateCounterKeys = "RATE#*"

var functions = []function{
	{ID: "OffersFunction", Dir: "offers", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/offers",
		"POST /api/v1/offers",
		"GET /api/v1/offers/{id}",
	}},
	{ID: "PartnersFunction", Dir: "partners", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/partners",
		"GET /api/v1/partners/{id}",
		"POST /api/v1/partners/{id}/approve",
		"POST /api/v1/partners/{id}/reject",
		"POST /api/v1/partners/{id}/ban",
	}},
	{ID: "ConversionsFunction", Dir: "conversions", Timeout: 10, Kind: apiFunction, Routes: []string{
		"POST /api/v1/conversions",
		"GET /api/v1/conversions",
		"GET /api/v1/conversions/{id}",
		"POST /api/v1/conversions/{id}/approve",
		"POST /api/v1/conversions/{id}/reject",
	}},
	{ID: "ReportsFunction", Dir: "reports", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/reports",
	}},
	{ID: "ApplicationsFunction", Dir: "applications", Timeout: 10, Kind: apiFunction, Routes: []string{
		"POST /api/public/brands/{brandId}/applications",
	}},
	{ID: "WebhooksFunction", Dir: "webhooks", Timeout: 10, Kind: apiFunction, Routes: []string{
		"POST /api/public/webhooks",
		"GET /api/public/webhooks",
		"GET /api/public/webhooks/{id}",
		"DELETE /api/public/webhooks/{id}",
		"POST /api/public/webhooks/{id}/test",
		"GET /api/public/webhook-events",
	}},
	{ID: "DeliveriesFunction", Dir: "deliveries", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/deliveries",
		"GET /api/v1/deliveries/{id}",
		"POST /api/v1/deliveries/{id}/retry",
	}},
	{ID: "FallbackFunction", Dir: "fallback", Timeout: 10, Kind: fallbackFunction},
	{ID: "ApproverFunction", Dir: "approver", Timeout: 60, Kind: approverFunction},
	{ID: "FanoutFunction", Dir: "fanout", Timeout: 60, Kind: fanoutFunction},
	{ID: "DeliverFunction", Dir: "deliver", Timeout: 30, Kind: deliverFunction},
	{ID: "AttemptFunction", Dir: "attempt", Timeout: 20, Kind: attemptFunction},
}
