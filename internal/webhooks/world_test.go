package webhooks

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/ssrf"
	"github.com/tally-hq/tally/internal/store"
)

// world is what the engine's tests need around it: the capabilities that
// make brands, partners, offers, conversions and endpoints, over one store,
// wired as the embedded store's server wires them. Their methods are the
// world's.
type world struct {
	*Engine
	*endpoints.Log
	*identityService
	*partnersService
	*offersService
	*conversionsService
	*endpointsService
	events   *outbox.Writer
	pipeline *Pipeline // told of the events written, once made
}

type (
	identityService    = identity.Service
	partnersService    = partners.Service
	offersService      = offers.Service
	conversionsService = conversions.Service
	endpointsService   = endpoints.Service
)

// worldOption changes how a world is made.
type worldOption func(*worldConfig)

type worldConfig struct {
	clock    func() time.Time
	loopback bool
	observer Observer
	pace     bool
}

func withClock(clock func() time.Time) worldOption {
	return func(c *worldConfig) { c.clock = clock }
}

// withObserver tells observer of the attempts recorded.
func withObserver(observer Observer) worldOption {
	return func(c *worldConfig) { c.observer = observer }
}

// withPace paces attempts in the store's counters, as the AWS functions do.
func withPace() worldOption { return func(c *worldConfig) { c.pace = true } }

// withLoopback lets endpoints be on loopback, as on the local server.
func withLoopback() worldOption { return func(c *worldConfig) { c.loopback = true } }

func newWorld(t *testing.T, st store.Store, opts ...worldOption) *world {
	t.Helper()
	c := worldConfig{clock: time.Now}
	for _, o := range opts {
		o(&c)
	}
	db := records.New(st, c.clock, records.ShardZeroIDs{})
	w := &world{}
	w.events = outbox.NewWriter(db, 30*24*time.Hour, outbox.EveryEvent{}, func(ids []string) {
		if w.pipeline != nil {
			w.pipeline.Queue(ids)
		}
	})
	w.identityService = identity.New(db, time.Minute)
	w.partnersService = partners.New(db, w.events, w.identityService)
	w.offersService = offers.New(db, time.Minute)
	w.conversionsService = conversions.New(db, w.events, w.offersService, w.partnersService, reports.InWrite{}, conversions.InTransaction{}, nil)
	secrets := secretbox.New(st, secretbox.Unwrapped{})
	w.endpointsService = endpoints.New(db, w.events, w.partnersService, func(u string) error { return ssrf.CheckURL(u, c.loopback) }, secrets)
	var pace Pacer
	if c.pace {
		pace = ratelimit.NewShared(db)
	}
	w.Engine = New(db, Config{
		Health:            endpoints.HealthConfig{Failures: endpoints.DefaultDisableAfterFailures, Failing: endpoints.DefaultDisableAfterFailing},
		DeliveryRetention: 30 * 24 * time.Hour,
		Writes:            Batched{},
		Observer:          c.observer,
		Pace:              pace,
		Secrets:           secrets,
	})
	w.Log = endpoints.NewLog(db, w.endpointsService, 30*24*time.Hour, endpoints.NoRequeue)
	return w
}

// newPipeline makes the world's pipeline, told of the events written.
func (w *world) newPipeline(sender Sender, workers int, opts ...PipelineOption) *Pipeline {
	w.pipeline = NewPipeline(w.Engine, sender, workers, slog.New(slog.DiscardHandler), opts...)
	return w.pipeline
}
