package main

// The AWS layout of docs/aws.md, as data: one entry per Lambda function.
// template.yaml (SAM) implements the same contract; parity_test.go compares
// the two.

// kind says what drives a function.
type kind int

const (
	apiFunction        kind = iota // HTTP API routes
	approverFunction               // EventBridge schedule
	fanoutFunction                 // the table's stream
	deliverFunction                // the delivery queue
	attemptFunction                // the retry state machine
	fallbackFunction               // the HTTP API's $default route: what no route matches
	reconcilerFunction             // EventBridge schedule: re-drives dropped webhook work
	rollupFunction                 // the table's stream: adds new conversions and clicks to the report rollups
)

// function is one Lambda function: its logical id, its folder under
// functions/ (and bin/, where `make build` puts its bootstrap), its timeout
// in seconds and, for API functions, its routes ("METHOD /path"). The
// fallback has none of its own: it is the API's $default route, which
// answers what no other route matches in the API's error shape; it reads
// the table (to know the key) and writes only the rate-limit counters and
// the key's last use.
type function struct {
	ID      string
	Dir     string
	Timeout float64
	Kind    kind
	Routes  []string
	// ReadOnly: an API function whose routes only read (it still counts
	// requests in the rate-limit counters).
	ReadOnly bool
	// Memory is the function's memory in MB when not memorySize.
	Memory float64
}

// memorySize is every function's memory, in MB, but those that say.
const memorySize = 256

// memory is the function's memory, in MB.
func (f function) memory() float64 {
	if f.Memory != 0 {
		return f.Memory
	}
	return memorySize
}

// Environment variable names the functions read (internal/lambdafn).
const (
	envTable                = "TALLY_TABLE"
	envDeliveryQueueURL     = "TALLY_DELIVERY_QUEUE_URL"
	envRetryStateMachineARN = "TALLY_RETRY_STATE_MACHINE_ARN"
	envSecretsKeyARN        = "TALLY_SECRETS_KEY_ARN"
	envRateLimit            = "TALLY_RATE_LIMIT"
	envApplicationRateLimit = "TALLY_APPLICATION_RATE_LIMIT"
	envClickRateLimit       = "TALLY_CLICK_RATE_LIMIT"
	envDeliveryRetention    = "TALLY_DELIVERY_RETENTION_DAYS"
	envDeliverConcurrency   = "TALLY_DELIVER_MAX_CONCURRENCY"
	envFanoutDLQURL         = "TALLY_FANOUT_DLQ_URL"
)

// approverRuns is the approver's reserved concurrency: the runs that
// overlap while a backlog lasts, each draining approveShardsAtOnce (8) of
// the hold queue's 32 shards (internal/conversions); a run every minute
// working up to its 240 s timeout makes 4.
const approverRuns = 4

// Schedule expressions of the approver and the reconciler.
const (
	approverSchedule   = "rate(1 minute)"
	reconcilerSchedule = "rate(5 minutes)"
)

// fanoutFilters are the stream filters: only inserted event items
// (outbox) but those the fan-out wrote itself (a stack deployed before
// has them), and inserted conversions whose event the fan-out makes.
var fanoutFilters = []string{
	`{"eventName":["INSERT"],"dynamodb":{"Keys":{"pk":{"S":[{"prefix":"EVT#"}]}},"NewImage":{"outbox":{"S":[{"exists":false}]}}}}`,
	`{"eventName":["INSERT"],"dynamodb":{"NewImage":{"fanout":{"S":["stream"]}}}}`,
}

// rollupFilter is the rollup function's stream filter: only inserted
// conversions and clicks whose rollups are left to the stream.
const rollupFilter = `{"eventName":["INSERT"],"dynamodb":{"NewImage":{"rollup":{"S":["stream"]}}}}`

// maxRecordAge is the stream mappings' MaximumRecordAgeInSeconds: what
// they give up at 6 hours the stream (24 hours) keeps for 18 more.
const maxRecordAge = 6 * 3600

// writeKeys are the partitions each API function may write, by action
// (dynamodb:LeadingKeys of its PutItem, UpdateItem and DeleteItem; an
// action it never does is not granted). The main module's
// internal/partitions test derives them from the code and holds
// template.yaml to them; the parity test holds this stack to template.yaml.
var writeKeys = map[string]map[string][]string{
	"OffersFunction":       {put: {"BRD#*", "CONFIG", "OFF#*"}, update: {"KEY#*", "RATE#*"}},
	"PartnersFunction":     {put: {"BRD#*", "CONFIG", "EVT#*", "PINV#*"}, update: {"BRD#*", "KEY#*", "RATE#*"}, del: {"BRD#*", "HRC#*"}},
	"ConversionsFunction":  {put: {"BRD#*", "CONFIG", "EVT#*", "PBT#*", "TXN#*"}, update: {"BAL#*", "BRD#*", "CAP#*", "KEY#*", "OWED#*", "RATE#*"}, del: {"BRD#*", "PBT#*"}},
	"ReportsFunction":      {update: {"RATE#*", "KEY#*"}},
	"PayoutsFunction":      {put: {"BRD#*", "CONFIG", "EVT#*"}, update: {"BAL#*", "BRD#*", "KEY#*", "PAY#*", "RATE#*"}, del: {"OWED#*"}},
	"ApplicationsFunction": {put: {"BRD#*", "EVT#*"}, update: {"KEY#*", "RATE#*"}},
	"WebhooksFunction":     {put: {"BRD#*", "CONFIG", "EVT#*"}, update: {"BRD#*", "KEY#*", "RATE#*"}, del: {"BRD#*"}},
	"DeliveriesFunction":   {put: {"BRD#*", "CONFIG"}, update: {"KEY#*", "RATE#*"}},
	"KeysFunction":         {put: {"BRD#*", "CONFIG", "KEY#*"}, update: {"BRD#*", "KEY#*", "RATE#*"}},
	"DashboardFunction":    {put: dashboardWrites, update: dashboardWrites, del: dashboardWrites},
	"ClickFunction":        {put: {"BRD#*", "EVT#*"}, update: {"HRC#*", "KEY#*", "RATE#*", "VEL#*"}},
	"FraudFunction":        {put: {"BRD#*", "CONFIG"}, update: {"BRD#*", "KEY#*", "RATE#*"}, del: {"BRD#*"}},
	"HealthFunction":       {update: {"RATE#*", "KEY#*"}},
	"FallbackFunction":     {update: {"RATE#*", "KEY#*"}},
}

// The write actions, as writeKeys names them.
const (
	put    = "dynamodb:PutItem"
	update = "dynamodb:UpdateItem"
	del    = "dynamodb:DeleteItem"
)

// dashboardWrites are every partition the dashboard's code names: its
// templates call methods by reflection, which the derivation cannot follow.
var dashboardWrites = []string{"BAL#*", "BRD#*", "CAP#*", "CONFIG", "EVT#*", "HOLDLEASE#*", "HRC#*", "INV#*", "KEY#*", "OFF#*", "OWED#*", "PAY#*", "PBT#*", "PINV#*", "PLOGIN#*", "PSESS#*", "RATE#*", "RST#*", "RUCP#*", "SESS#*", "TXN#*", "USER#*"}

// errorsAlarm describes each kind of function's <Function>ErrorsAlarm (%s:
// its logical id).
var errorsAlarm = map[kind]string{
	apiFunction:        "%s failed an invocation (a crash or its 10 s timeout): API Gateway answered 500 for it.",
	fallbackFunction:   "%s failed an invocation (a crash or its 10 s timeout): API Gateway answered 500 for it.",
	approverFunction:   "A hold-time approval run failed (%s).",
	reconcilerFunction: "A reconciler run failed or could not re-drive everything it found (%s).",
	fanoutFunction:     "A fan-out invocation failed (%s): Lambda retries its stream batch (then FanoutDLQ).",
	rollupFunction:     "A rollup invocation failed (%s): Lambda retries its stream batch (then RollupDLQ).",
	deliverFunction:    "A deliver invocation failed as a whole (%s): its messages go back to DeliveryQueue (after 5 receives, DeliveryDLQ).",
	attemptFunction:    "A retry attempt task failed (%s, not the receiver); the state machine retries it, then abandons the delivery.",
}

// throttlesAlarm describes the <Function>ThrottlesAlarm of the kinds of
// function with reserved concurrency, which Lambda refuses on their own;
// the others share the account's, which lambdaThrottlesAlarm watches.
var throttlesAlarm = map[kind]string{
	approverFunction:   "An approver run (%s) was refused: 4 runs still went (its reserved concurrency), approvals fall behind.",
	reconcilerFunction: "A reconciler run (%s) was refused: the previous one still ran (reserved concurrency 1).",
}

const lambdaThrottlesAlarm = "Lambda refused to run a function of the account and region (no concurrency left): an API function's callers got a 5xx, stream and queue work waits and retries. The functions without reserved concurrency share the account's, so this watches them all."

var functions = []function{
	{ID: "OffersFunction", Dir: "offers", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/offers",
		"POST /api/v1/offers",
		"GET /api/v1/offers/{id}",
		"PATCH /api/v1/offers/{id}",
		// Partner money: per-partner payout terms.
		"GET /api/v1/offers/{id}/partners/{partnerId}/terms",
		"PUT /api/v1/offers/{id}/partners/{partnerId}/terms",
		"DELETE /api/v1/offers/{id}/partners/{partnerId}/terms",
	}},
	{ID: "PartnersFunction", Dir: "partners", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/partners",
		"GET /api/v1/partners/{id}",
		"POST /api/v1/partners/{id}/approve",
		"POST /api/v1/partners/{id}/reject",
		"POST /api/v1/partners/{id}/ban",
		"POST /api/v1/partners/{id}/reactivate", // partner money
		"POST /api/v1/partners/{id}/invite",     // the partner portal
		"PUT /api/v1/partners/{id}/postback",
		"GET /api/v1/partners/{id}/postback",
		"DELETE /api/v1/partners/{id}/postback",
		"POST /api/v1/partners/{id}/postback/test",
		"POST /api/v1/partners/{id}/postback/enable",
	}},
	{ID: "ConversionsFunction", Dir: "conversions", Timeout: 10, Kind: apiFunction, Routes: []string{
		"POST /api/v1/conversions",
		"GET /api/v1/conversions",
		"GET /api/v1/conversions/{id}",
		"POST /api/v1/conversions/{id}/approve",
		"POST /api/v1/conversions/{id}/reject",
		"POST /api/v1/conversions/{id}/reverse", // partner money
		"GET /api/v1/postback-token",
		"POST /api/v1/postback-token",
		"DELETE /api/v1/postback-token",
		"GET /postback",
	}},
	{ID: "ReportsFunction", Dir: "reports", Timeout: 10, Kind: apiFunction, ReadOnly: true, Routes: []string{
		"GET /api/v1/reports",
	}},
	// Partner money: balances and payouts.
	{ID: "PayoutsFunction", Dir: "payouts", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/partners/{id}/balance",
		"GET /api/v1/payouts",
		"POST /api/v1/payouts",
		"GET /api/v1/payouts/{id}",
		"POST /api/v1/payouts/{id}/paid",
	}},
	{ID: "ApplicationsFunction", Dir: "applications", Timeout: 10, Kind: apiFunction, Routes: []string{
		"POST /api/public/brands/{brandId}/applications",
	}},
	{ID: "WebhooksFunction", Dir: "webhooks", Timeout: 10, Kind: apiFunction, Routes: []string{
		"POST /api/public/webhooks",
		"GET /api/public/webhooks",
		"GET /api/public/webhooks/{id}",
		"PATCH /api/public/webhooks/{id}",
		"DELETE /api/public/webhooks/{id}",
		"POST /api/public/webhooks/{id}/test",
		"POST /api/public/webhooks/{id}/enable",
		"POST /api/public/webhooks/{id}/rotate",
		"GET /api/public/webhook-events",
	}},
	{ID: "DeliveriesFunction", Dir: "deliveries", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/deliveries",
		"GET /api/v1/deliveries/{id}",
		"POST /api/v1/deliveries/{id}/retry",
		"POST /api/public/webhooks/{id}/recover",
		"POST /api/v1/partners/{id}/postback/recover",
	}},
	{ID: "KeysFunction", Dir: "keys", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/keys",
		"POST /api/v1/keys",
		"DELETE /api/v1/keys/{id}",
		"GET /api/v1/audit-log",
	}},
	{ID: "DashboardFunction", Dir: "dashboard", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /dashboard",
		"GET /dashboard/{path+}",
		"POST /dashboard/{path+}",
		"GET /apply/{brandId}",
		"POST /apply/{brandId}",
		"GET /portal", // the partner portal
		"GET /portal/{path+}",
		"POST /portal/{path+}",
	}},
	{ID: "ClickFunction", Dir: "click", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /c/{offerId}",
	}},
	{ID: "FraudFunction", Dir: "fraud", Timeout: 10, Kind: apiFunction, Routes: []string{
		"GET /api/v1/clicks",
		"GET /api/v1/clicks/{id}",
		"GET /api/v1/fraud/settings",
		"PUT /api/v1/fraud/settings",
		"GET /api/v1/fraud/blocked-ips",
		"POST /api/v1/fraud/blocked-ips",
		"DELETE /api/v1/fraud/blocked-ips/{id}",
	}},
	{ID: "HealthFunction", Dir: "health", Timeout: 10, Kind: apiFunction, ReadOnly: true, Routes: []string{
		"GET /healthz",
		"GET /readyz",
	}},
	{ID: "FallbackFunction", Dir: "fallback", Timeout: 10, Kind: fallbackFunction},
	{ID: "ApproverFunction", Dir: "approver", Timeout: 240, Kind: approverFunction},
	{ID: "FanoutFunction", Dir: "fanout", Timeout: 60, Kind: fanoutFunction},
	{ID: "DeliverFunction", Dir: "deliver", Timeout: 30, Kind: deliverFunction},
	{ID: "AttemptFunction", Dir: "attempt", Timeout: 20, Kind: attemptFunction},
	{ID: "ReconcilerFunction", Dir: "reconciler", Timeout: 240, Memory: 1024, Kind: reconcilerFunction}, // CPU for its re-drives (docs/aws.md, "The reconciler")
	{ID: "RollupFunction", Dir: "rollup", Timeout: 60, Kind: rollupFunction},
}

// What each kind of function does to the table (docs/aws.md, "Least
// privilege"): the actions the store makes for it. A transaction's items are
// authorized one by one as these actions.
var tableActions = map[kind][]string{
	apiFunction:        {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:ConditionCheckItem"}, // and writeKeys' writes
	approverFunction:   {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
	fanoutFunction:     {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"},
	deliverFunction:    {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, // and the endpoint's health
	attemptFunction:    {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"},
	reconcilerFunction: {"dynamodb:GetItem", "dynamodb:Query", "dynamodb:PutItem"},
	rollupFunction:     {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"}, // the shard checkpoints, the rollups
}

// readOnlyActions are a read-only API function's; it may also update the
// rate-limit counters.
var readOnlyActions = []string{"dynamodb:GetItem", "dynamodb:Query"}

// queriesIndexes are the kinds that query gsi1–3.
var queriesIndexes = []kind{apiFunction, approverFunction, reconcilerFunction}

// sendsDeliveries are the functions with TALLY_DELIVERY_QUEUE_URL: they
// queue deliveries (deliver queues a paced one again, to wait its turn).
var sendsDeliveries = []string{"FanoutFunction", "DeliveriesFunction", "DashboardFunction", "ReconcilerFunction", "DeliverFunction"}

// usesSecrets are the functions with TALLY_SECRETS_KEY_ARN and what they
// may do with the key: those that sign open the signing secrets; those
// that set them seal them too, and the first to need it makes the data key.
var usesSecrets = map[string][]string{
	"WebhooksFunction":  {"kms:Decrypt", "kms:GenerateDataKey"},
	"DashboardFunction": {"kms:Decrypt", "kms:GenerateDataKey"},
	"DeliverFunction":   {"kms:Decrypt"},
	"AttemptFunction":   {"kms:Decrypt"},
}
