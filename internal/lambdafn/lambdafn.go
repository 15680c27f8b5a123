// Package lambdafn runs Tally's Lambda functions. Each main in functions/
// makes one Serve* call: lambdafn.ServeAPI with the route groups its
// function serves, lambdafn.ServeApprover or ServeAttempt, or one of the
// packages beside this one, whose functions call AWS services besides the
// table: lambdafn/queue (the fan-out, the reconciler and the deliveries
// routes, which send to SQS) and lambdafn/deliver (which starts Step
// Functions executions). Each function so links only the clients it uses.
// All the logic lives in internal/.
//
// The handlers are built by APIHandler, ApproverHandler, AttemptHandler and
// their siblings in those packages, which take a service.Service, so tests
// invoke them with sample events directly; only the Serve functions read
// the environment and call lambda.Start.
package lambdafn

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/awsenv"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Pages makes the dashboard's handler (dashboard.New). The main of the
// function that serves httpapi.GroupDashboard sets it before ServeAPI, so
// that no other function links the dashboard's templates.
var Pages func(*service.Service, httpapi.Config) http.Handler

// Zones loads the time zones reports bucket days in (tzdb.LoadLocation).
// The mains of the functions that serve reports set it before ServeAPI:
// provided.al2023 has no zone database, and the other functions need none.
var Zones func(name string) (*time.Location, error)

// Environment of the webhook pipeline's functions.
const (
	EnvDeliveryQueueURL     = "TALLY_DELIVERY_QUEUE_URL"      // fanout and reconciler send to it; deliveries requeues manual retries
	EnvRetryStateMachineARN = "TALLY_RETRY_STATE_MACHINE_ARN" // deliver starts it
)

// ServeAPI runs a function that serves the HTTP API's routes of groups
// (httpapi.GroupOffers, …) behind API Gateway (HTTP API, payload format 2.0).
// It never returns; a configuration error ends the process with a log line
// saying what to fix, so the function fails at init, not per request.
func ServeAPI(groups ...string) { ServeAPIWith(nil, groups...) }

// ServeAPIWith is ServeAPI with the service's options opts added to those
// of the environment.
func ServeAPIWith(opts []service.Option, groups ...string) {
	log := Logger()
	if Zones != nil {
		opts = append(opts, service.WithZones(Zones))
	}
	svc, cfg, err := Setup(log, opts...)
	if err != nil {
		Fatal(log, err)
	}
	if Pages != nil {
		cfg.Dashboard = Pages(svc, cfg)
	}
	handler, err := APIHandler(svc, cfg, groups...)
	if err != nil {
		Fatal(log, err)
	}
	lambda.Start(handler)
}

// ServeAttempt runs the retry state machine's task. It never returns.
func ServeAttempt() {
	_, svc := Start()
	lambda.Start(AttemptHandler(svc, CloudSender()))
}

// ServeApprover runs the scheduled function that approves pending
// conversions whose hold time has elapsed. It never returns.
func ServeApprover() {
	log, svc := Start()
	lambda.Start(ApproverHandler(svc, log))
}

// CloudSender sends to public https receivers only (the SSRF guard).
func CloudSender() *delivery.Sender { return delivery.NewSender(delivery.Options{}) }

// Logger is every function's logger (JSON lines at TALLY_LOG_LEVEL), also
// made slog's default.
func Logger() *slog.Logger {
	log := app.Logger()
	slog.SetDefault(log)
	return log
}

// Start sets up a function that is not behind the HTTP API: its logger and
// its service. A configuration error ends the process.
func Start() (*slog.Logger, *service.Service) {
	log := Logger()
	svc, _, err := Setup(log)
	if err != nil {
		Fatal(log, err)
	}
	return log, svc
}

// MustEnv returns the variable name, or ends the process when it is unset.
func MustEnv(log *slog.Logger, name string) string {
	v := os.Getenv(name)
	if v == "" {
		Fatal(log, fmt.Errorf("%s is not set", name))
	}
	return v
}

// Setup builds what every function needs from its environment: the tracking
// service over the DynamoDB table TALLY_TABLE names (with opts), and the
// HTTP API's settings (TALLY_RATE_LIMIT, TALLY_APPLICATION_RATE_LIMIT).
// Reports are kept, and new conversions fanned out, from the table's stream
// (service.WithStreamRollups, service.WithStreamConversions).
// Unlike the local server, a function never falls back to the embedded
// store: that would keep data in one instance's /tmp and lose it. Opening
// the table builds a client and makes no call.
func Setup(log *slog.Logger, opts ...service.Option) (*service.Service, httpapi.Config, error) {
	cfg, err := app.APIConfig(log)
	if err != nil {
		return nil, cfg, err
	}
	table := os.Getenv(app.EnvTable)
	if table == "" {
		return nil, cfg, fmt.Errorf("%s is not set: a Lambda function needs the name of its DynamoDB table", app.EnvTable)
	}
	awsCfg, err := awsenv.Config()
	if err != nil {
		return nil, cfg, err
	}
	client := dynamodb.NewFromConfig(awsCfg, func(o *dynamodb.Options) { o.BaseEndpoint = awsenv.Endpoint("DYNAMODB") })
	envOpts, _, err := app.ServiceOptions()
	if err != nil {
		return nil, cfg, err
	}
	// The table's stream adds new conversions and clicks to the report
	// rollups (the rollup function), in batches rather than in each write,
	// and carries new conversions to the fan-out, which makes their events.
	envOpts = append(envOpts, StreamOptions()...)
	return service.New(dynamo.New(client, table), append(append(envOpts, service.Partitioned()), opts...)...), cfg, nil
}

// StreamOptions are the service options by which the functions leave work
// to the table's stream (Setup adds them): the report rollups of new
// conversions and clicks, and the events of new conversions.
func StreamOptions() []service.Option {
	return []service.Option{service.WithStreamRollups(), service.WithStreamConversions()}
}

// Fatal logs why the function cannot start and exits; Lambda reports an
// init error (Runtime.ExitError) and retries init on the next invocation.
func Fatal(log *slog.Logger, err error) {
	log.Error("cannot start the function", "err", err.Error())
	os.Exit(1)
}

// errUnknownGroup is returned by APIHandler for a group httpapi does not have.
var errUnknownGroup = errors.New("unknown route group")
