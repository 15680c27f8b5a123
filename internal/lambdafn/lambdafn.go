// Package lambdafn runs Tally's Lambda functions. Each main in functions/
// calls ServeAPI with the route groups its function serves, or one of
// ServeApprover, ServeFanout, ServeDeliver, ServeAttempt; all the logic
// lives in internal/.
//
// The handlers are built by APIHandler, ApproverHandler, FanoutHandler,
// DeliverHandler and AttemptHandler, which take a tracking.Service, so tests
// invoke them with sample events directly; only the Serve functions read the
// environment and call lambda.Start.
package lambdafn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sfn"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/tracking"
)

// openTimeout bounds how long opening the store may take during init.
const openTimeout = 10 * time.Second

// ServeAPI runs a function that serves the HTTP API's routes of groups
// (httpapi.GroupOffers, …) behind API Gateway (HTTP API, payload format 2.0).
// It never returns; a configuration error ends the process with a log line
// saying what to fix, so the function fails at init, not per request.
func ServeAPI(groups ...string) {
	log := app.Logger()
	slog.SetDefault(log)
	svc, cfg, err := Setup(context.Background(), log)
	if err != nil {
		fatal(log, err)
	}
	handler, err := APIHandler(svc, cfg, groups...)
	if err != nil {
		fatal(log, err)
	}
	lambda.Start(handler)
}

// Environment of the webhook pipeline's functions.
const (
	EnvDeliveryQueueURL     = "TALLY_DELIVERY_QUEUE_URL"      // fanout sends to it; deliveries requeues manual retries
	EnvRetryStateMachineARN = "TALLY_RETRY_STATE_MACHINE_ARN" // deliver starts it
)

// ServeFanout runs the function behind the table's stream. It never returns.
func ServeFanout() {
	log, svc := start()
	lambda.Start(FanoutHandler(svc, sqs.NewFromConfig(awsConfig(log)), mustEnv(log, EnvDeliveryQueueURL), log))
}

// ServeDeliver runs the function behind the delivery queue. It never returns.
func ServeDeliver() {
	log, svc := start()
	lambda.Start(DeliverHandler(svc, cloudSender(), sfn.NewFromConfig(awsConfig(log)), mustEnv(log, EnvRetryStateMachineARN), log))
}

// ServeAttempt runs the retry state machine's task. It never returns.
func ServeAttempt() {
	_, svc := start()
	lambda.Start(AttemptHandler(svc, cloudSender()))
}

// cloudSender sends to public https receivers only (the SSRF guard).
func cloudSender() *delivery.Sender { return delivery.NewSender(delivery.Options{}) }

func start() (*slog.Logger, *tracking.Service) {
	log := app.Logger()
	slog.SetDefault(log)
	svc, _, err := Setup(context.Background(), log)
	if err != nil {
		fatal(log, err)
	}
	return log, svc
}

func mustEnv(log *slog.Logger, name string) string {
	v := os.Getenv(name)
	if v == "" {
		fatal(log, fmt.Errorf("%s is not set", name))
	}
	return v
}

func awsConfig(log *slog.Logger) aws.Config {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		fatal(log, err)
	}
	return cfg
}

// ServeApprover runs the scheduled function that approves pending
// conversions whose hold time has elapsed. It never returns.
func ServeApprover() {
	log, svc := start()
	lambda.Start(ApproverHandler(svc, log))
}

// Setup builds what every function needs from its environment: the tracking
// service over the DynamoDB table TALLY_TABLE names, and the HTTP API's
// settings (TALLY_RATE_LIMIT, TALLY_APPLICATION_RATE_LIMIT). Unlike the
// local server, a function never falls back to the embedded store: that
// would keep data in one instance's /tmp and lose it. Opening the table
// builds a client and makes no call, so a function that never reads it (the
// fallback behind the $default route) runs without any table permission;
// it still needs TALLY_TABLE set.
func Setup(ctx context.Context, log *slog.Logger) (*tracking.Service, httpapi.Config, error) {
	cfg, err := app.APIConfig(log)
	if err != nil {
		return nil, cfg, err
	}
	if !app.UsesDynamoDB() {
		return nil, cfg, fmt.Errorf("%s is not set: a Lambda function needs the name of its DynamoDB table", app.EnvTable)
	}
	ctx, cancel := context.WithTimeout(ctx, openTimeout)
	defer cancel()
	st, err := app.OpenStore(ctx, "")
	if err != nil {
		return nil, cfg, fmt.Errorf("open DynamoDB table %q: %w", os.Getenv(app.EnvTable), err)
	}
	var opts []tracking.Option
	if queueURL := os.Getenv(EnvDeliveryQueueURL); queueURL != "" {
		awsCfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return nil, cfg, err
		}
		opts = append(opts, tracking.WithRequeue(Requeue(sqs.NewFromConfig(awsCfg), queueURL)))
	}
	return tracking.New(st, opts...), cfg, nil
}

// fatal logs why the function cannot start and exits; Lambda reports an
// init error (Runtime.ExitError) and retries init on the next invocation.
func fatal(log *slog.Logger, err error) {
	log.Error("cannot start the function", "err", err.Error())
	os.Exit(1)
}

// errUnknownGroup is returned by APIHandler for a group httpapi does not have.
var errUnknownGroup = errors.New("unknown route group")
