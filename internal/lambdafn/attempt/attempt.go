// Package attempt runs the retry workflow's task, which makes attempts 2
// to 7 of a delivery, and holds what both functions that send start with:
// the engine over the table and the sender.
package attempt

import (
	"context"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/awskms"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/webhooks"
)

// Serve runs the retry state machine's task. It never returns.
func Serve() {
	lambda.Start(Handler(Engine(lambdafn.Logger(), emf.New(os.Stdout)), CloudSender()))
}

// Engine is the webhook engine over the function's table, its fan-outs
// written apart (webhooks.Apart: DynamoDB bills each item of a transaction
// twice), its attempts counted in metrics (CloudWatch Embedded Metric Format
// lines on stdout). A configuration error ends the process.
func Engine(log *slog.Logger, metrics *emf.Metrics) *webhooks.Engine {
	db, settings := lambdafn.Start(log)
	key, err := awskms.FromEnv()
	if err != nil {
		lambdafn.Fatal(log, err)
	}
	return NewEngine(db, settings, metrics, secretbox.New(db.Store, key))
}

// NewEngine is the webhook engine over db with settings, as Engine makes
// it, telling observer (nil: nobody) of each attempt recorded and opening
// the signing secrets with secrets. Attempts to
// an endpoint with a maxPerSecond take a place in its counter for the
// second (ratelimit.Shared), shared by every instance of both functions.
func NewEngine(db *records.DB, settings app.Settings, observer webhooks.Observer, secrets *secretbox.Box) *webhooks.Engine {
	return webhooks.New(db, webhooks.Config{Health: settings.Health(), DeliveryRetention: settings.DeliveryRetention, Writes: webhooks.Apart{}, Observer: observer,
		Pace: ratelimit.NewShared(db), Secrets: secrets})
}

// CloudSender sends to public https receivers only (the SSRF guard).
func CloudSender() *delivery.Sender { return delivery.NewSender(delivery.Options{}) }

// RetryInput is the input of a retry execution and of each attempt task.
type RetryInput struct {
	endpoints.DeliveryRef
	// Attempt is set by the state machine for each attempt task, and in a
	// restarted execution's input: the attempt it resumes at.
	Attempt int `json:"attempt,omitempty"`
	// ResumeAt is when a restarted execution makes that attempt.
	ResumeAt *tally.Time `json:"resumeAt,omitempty"`
	// NextAttemptAt is when attempt 2 is due, in a first execution's
	// input: the schedule's wait, or longer when the receiver asked.
	NextAttemptAt *tally.Time `json:"nextAttemptAt,omitempty"`
	// Abandon is set by the state machine's Catch: mark the delivery failed.
	Abandon bool `json:"abandon,omitempty"`
}

// Handler is the retry state machine's task: one attempt of a
// delivery, or, when the execution gives up, marking it failed.
func Handler(engine *webhooks.Engine, sender webhooks.Sender) func(context.Context, RetryInput) (webhooks.AttemptResult, error) {
	return func(ctx context.Context, in RetryInput) (webhooks.AttemptResult, error) {
		if in.Abandon {
			return engine.AbandonDelivery(ctx, in.DeliveryRef)
		}
		return engine.Attempt(ctx, in.DeliveryRef, in.Attempt, sender)
	}
}
