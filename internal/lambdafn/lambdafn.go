// Package lambdafn is what every one of Tally's Lambda functions starts
// with: its logger, its table and its settings from the environment. Each
// main in functions/ makes one Serve call of a package beside this one,
// which wires what that function uses and nothing more: api (the HTTP
// API's route groups), fanout (the fan-out and the reconciler, which send
// to SQS through queue), deliver (attempt 1 and the retries' attempts),
// approve (the hold-time approval) and rollup (the reports' rollups from
// the stream).
// All the logic lives in internal/.
package lambdafn

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/awsenv"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Environment of the webhook pipeline's functions.
const (
	EnvDeliveryQueueURL     = "TALLY_DELIVERY_QUEUE_URL"      // fanout and reconciler send to it; deliveries requeues manual retries
	EnvRetryStateMachineARN = "TALLY_RETRY_STATE_MACHINE_ARN" // deliver starts it
	EnvDeliverConcurrency   = "TALLY_DELIVER_MAX_CONCURRENCY" // deliver's batches at once: the reconciler's backlog threshold follows it
	EnvFanoutDLQURL         = "TALLY_FANOUT_DLQ_URL"          // the reconciler takes the fan-out's failed stream batches from it
)

// StopAt is when a run that must end by ctx's deadline starts no more
// work: margin before it, kept for finishing what is under way, or a
// quarter of the time left when that is less than 4 margins (a short
// timeout still gets work done). Without a deadline, never.
func StopAt(ctx context.Context, margin time.Duration) time.Time {
	deadline, ok := ctx.Deadline()
	if !ok {
		return time.Time{}
	}
	return deadline.Add(-min(margin, time.Until(deadline)/4))
}

// Logger is every function's logger (JSON lines at TALLY_LOG_LEVEL), also
// made slog's default.
func Logger() *slog.Logger {
	log := app.Logger()
	slog.SetDefault(log)
	return log
}

// MustEnv returns the variable name, or ends the process when it is unset.
func MustEnv(log *slog.Logger, name string) string {
	v := os.Getenv(name)
	if v == "" {
		Fatal(log, fmt.Errorf("%s is not set", name))
	}
	return v
}

// Fatal logs why the function cannot start and exits; Lambda reports an
// init error (Runtime.ExitError) and retries init on the next invocation.
func Fatal(log *slog.Logger, err error) {
	log.Error("cannot start the function", "err", err.Error())
	os.Exit(1)
}

// OpenDB opens the DynamoDB table TALLY_TABLE names, its items laid out
// for DynamoDB (records.SpreadIDs). Unlike the local server, a function
// never falls back to the embedded store: that would keep data in one
// instance's /tmp and lose it. Opening the table builds a client and makes
// no call.
func OpenDB() (*records.DB, error) {
	table := os.Getenv(app.EnvTable)
	if table == "" {
		return nil, fmt.Errorf("%s is not set: a Lambda function needs the name of its DynamoDB table", app.EnvTable)
	}
	awsCfg, err := awsenv.Config()
	if err != nil {
		return nil, err
	}
	client := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.BaseEndpoint = awsenv.Endpoint("DYNAMODB") })
	return records.New(dynamo.New(client, table), time.Now, records.SpreadIDs{}), nil
}

// Start opens the function's table and reads its settings; a
// configuration error ends the process.
func Start(log *slog.Logger) (*records.DB, app.Settings) {
	db, err := OpenDB()
	if err != nil {
		Fatal(log, err)
	}
	settings, err := app.ReadSettings()
	if err != nil {
		Fatal(log, err)
	}
	return db, settings
}
