// Package webhooks is Tally's webhook engine. It fans the outbox's events
// out into deliveries, one per endpoint that asked for the event; makes
// their attempts, signed and sent by a Sender and retried on the schedule;
// keeps the endpoints' health and circuit breakers; recovers what a stage
// dropped; and keeps the delivery log. On the local server a Pipeline runs
// it; on AWS the table's stream, the queue and the state machine do.
package webhooks

import (
	"context"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/secretbox"
)

// Engine fans events out and makes their deliveries' attempts.
type Engine struct {
	db     *records.DB
	health endpoints.HealthConfig
	// retryScale multiplies the retry schedule: 1 in production, small in
	// tests that watch a whole schedule pass.
	retryScale float64
	// deliveryRetention is how long a delivery stays after its last change.
	deliveryRetention time.Duration
	answers           *endpoints.Answers
	writes            FanOutWrites
	observer          Observer
	pacer             Pacer
	secrets           *secretbox.Box
}

// Config is how an Engine runs.
type Config struct {
	// Health says when an endpoint is disabled.
	Health endpoints.HealthConfig
	// RetryScale multiplies the retry schedule (0: 1).
	RetryScale float64
	// DeliveryRetention is how long a delivery and its attempts stay in
	// the log after their last change.
	DeliveryRetention time.Duration
	// Writes is how fan-outs are written (Batched or Apart).
	Writes FanOutWrites
	// Observer is told of each attempt recorded; nil: nobody is.
	Observer Observer
	// Pace holds the attempts to an endpoint with a maxPerSecond to it
	// (nil: the transport paces them, as the local Pipeline does): an
	// attempt past it is not made, and its step says when to ask again
	// (AttemptResult.Paced).
	Pace Pacer
	// Secrets opens the subscriptions' signing secrets (nil: the engine
	// signs nothing, as the fan-out, which makes no attempt).
	Secrets *secretbox.Box
}

// New returns an Engine over db.
func New(db *records.DB, c Config) *Engine {
	if c.RetryScale == 0 {
		c.RetryScale = 1
	}
	return &Engine{db: db, health: c.Health, retryScale: c.RetryScale, deliveryRetention: c.DeliveryRetention,
		answers: endpoints.NewAnswers(db, c.DeliveryRetention), writes: c.Writes, observer: c.Observer, pacer: c.Pace, secrets: c.Secrets}
}

// Now is the engine's time, in UTC to the millisecond.
func (s *Engine) Now() time.Time { return s.db.Now() }

// Delivery reads the delivery ref names.
func (s *Engine) Delivery(ctx context.Context, ref endpoints.DeliveryRef) (tally.Delivery, error) {
	rec, err := records.Get[endpoints.DeliveryRecord](ctx, s.db, keys.Delivery(ref.BrandID, ref.DeliveryID))
	return rec.Delivery, err
}
