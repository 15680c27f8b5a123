// Package service wires Tally's capabilities over one store, as the local
// server runs them and as the tests of the whole use them. Each capability
// is a package of its own (docs/architecture.md); how a deployment runs
// them — where report rollups are kept, how a conversion and a fan-out are
// written, how identifiers are placed, where rate limits are counted,
// whether a pipeline in this process delivers — is chosen here, by the
// options, once. The AWS functions wire what each needs themselves
// (internal/lambdafn), so that each links only that.
package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/password"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/ssrf"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/webhooks"
)

// Service is every capability of Tally over one store.
type Service struct {
	DB          *records.DB
	Events      *outbox.Writer
	Identity    *identity.Service
	Accounts    *accounts.Service
	Limits      Limits
	Offers      *offers.Service
	Partners    *partners.Service
	Reports     *reports.Service
	Clicks      *clicks.Service
	Conversions *conversions.Service
	Endpoints   *endpoints.Service
	Deliveries  *endpoints.Log
	Payouts     *payouts.Service
	Portal      *portalaccess.Service
	Audit       *audit.Log
	Webhooks    *webhooks.Engine
	// Pipeline delivers in this process (WithPipeline); nil otherwise.
	Pipeline *webhooks.Pipeline
}

// Limits counts requests against rate limits (ratelimit.Shared or
// ratelimit.Local).
type Limits interface {
	Allow(ctx context.Context, bucket string, limit int) (ratelimit.Decision, error)
	AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (ratelimit.Decision, error)
}

// config is what the options choose.
type config struct {
	clock             func() time.Time
	cacheTTL          time.Duration
	deliveryRetention time.Duration
	zones             func(name string) (*time.Location, error)
	retryScale        float64
	checkURL          func(string) error
	requeue           endpoints.Requeue
	health            endpoints.HealthConfig
	localRates        bool
	sharedPace        bool
	queue             outbox.Queue
	rollups           reports.Rollups
	writing           conversions.Writing
	ids               records.IDs
	writes            webhooks.FanOutWrites
	pipeline          *pipelineConfig
	observer          Observer
	secrets           secretbox.Wrapper
}

type pipelineConfig struct {
	sender  webhooks.Sender
	workers int
	log     *slog.Logger
	opts    []webhooks.PipelineOption
}

// Option chooses how the Service runs.
type Option func(*config)

// WithClock replaces the wall clock, for tests.
func WithClock(now func() time.Time) Option { return func(c *config) { c.clock = now } }

// WithCacheTTL sets how long an instance trusts its cached API keys,
// offers and fraud settings. A revoked key keeps working on another
// instance for at most this long.
func WithCacheTTL(d time.Duration) Option { return func(c *config) { c.cacheTTL = d } }

// WithDeliveryRetention sets how long a delivery and its attempts stay in
// the log after its last change (the table's TTL removes them then).
func WithDeliveryRetention(d time.Duration) Option {
	return func(c *config) { c.deliveryRetention = d }
}

// WithZones loads reports' time zones with load instead of
// time.LoadLocation (where the system has no zone database).
func WithZones(load func(name string) (*time.Location, error)) Option {
	return func(c *config) { c.zones = load }
}

// WithRetryScale multiplies the webhook retry schedule's waits by f.
func WithRetryScale(f float64) Option { return func(c *config) { c.retryScale = f } }

// WithLoopbackReceivers lets endpoints be at loopback addresses, for the
// local server where developers run their receivers.
func WithLoopbackReceivers() Option {
	return func(c *config) { c.checkURL = func(u string) error { return ssrf.CheckURL(u, true) } }
}

// WithRequeue hands deliveries that a manual retry or a recovery made
// pending again to queue (on AWS, the delivery queue; the local pipeline
// finds them in the due index).
func WithRequeue(queue endpoints.Requeue) Option { return func(c *config) { c.requeue = queue } }

// WithProcessRateLimits counts rate limits in this process's memory
// (ratelimit.Local) rather than in the store: for a process that is the
// only one serving from its store (the embedded one, whose file is locked
// to one process).
func WithProcessRateLimits() Option { return func(c *config) { c.localRates = true } }

// WithSharedPace holds the attempts to an endpoint with a maxPerSecond to
// it in counters in the store (webhooks.Config.Pace), as the AWS functions
// do, whose attempts run in many processes; without it the engine leaves
// pacing to the local pipeline's scheduler.
func WithSharedPace() Option { return func(c *config) { c.sharedPace = true } }

// WithEndpointHealth sets when an endpoint (a webhook subscription or a
// partner's postback) is disabled: after failures consecutive failed
// attempts, or after failing for the duration failing with no success.
// Zero values keep the defaults.
func WithEndpointHealth(failures int, failing time.Duration) Option {
	return func(c *config) {
		if failures > 0 {
			c.health.Failures = int64(failures)
		}
		if failing > 0 {
			c.health.Failing = failing
		}
	}
}

// WithOutboxOnlyForEndpoints writes the events of a brand that has never
// had an endpoint without their outbox entry (outbox.OnlyForEndpoints): for
// one process on its store.
func WithOutboxOnlyForEndpoints() Option {
	return func(c *config) { c.queue = &outbox.OnlyForEndpoints{} }
}

// WithStreamRollups leaves new conversions' and clicks' rollups to the
// table's stream (reports.FromStream).
func WithStreamRollups() Option { return func(c *config) { c.rollups = reports.FromStream{} } }

// WithStreamConversions writes new conversions for the table's stream
// (conversions.ForStream).
func WithStreamConversions() Option { return func(c *config) { c.writing = conversions.ForStream{} } }

// ForDynamoDB lays items out for a store whose write throughput is per
// partition key and which bills each item of a transaction twice
// (DynamoDB): identifiers spread over every shard (records.SpreadIDs), and
// each delivery of a fan-out written by itself (webhooks.Apart). Without
// it, the layout is the embedded store's (records.ShardZeroIDs,
// webhooks.Batched).
func ForDynamoDB() Option {
	return func(c *config) { c.ids, c.writes = records.SpreadIDs{}, webhooks.Apart{} }
}

// WithSecrets wraps the data key that seals webhook signing secrets with w
// (the tests' stand-in for KMS); by default it is kept unwrapped in the
// store (secretbox.Unwrapped), as the local server has no key service.
func WithSecrets(w secretbox.Wrapper) Option { return func(c *config) { c.secrets = w } }

// WithPipeline delivers in this process: a webhooks.Pipeline sending with
// sender, each brand with up to workers attempts under way, told of every
// event the Service writes.
func WithPipeline(sender webhooks.Sender, workers int, log *slog.Logger, opts ...webhooks.PipelineOption) Option {
	return func(c *config) { c.pipeline = &pipelineConfig{sender, workers, log, opts} }
}

// Observer is told of what the capabilities record, for metrics (package
// metrics: Prometheus).
type Observer interface {
	clicks.Observer
	conversions.Observer
	webhooks.Observer
}

// WithObserver tells o of each click, each status a conversion enters and
// each delivery attempt recorded.
func WithObserver(o Observer) Option { return func(c *config) { c.observer = o } }

// New returns the Service over st.
func New(st store.Store, opts ...Option) *Service {
	c := config{
		clock:             time.Now,
		cacheTTL:          30 * time.Second,
		deliveryRetention: endpoints.DefaultDeliveryRetention,
		zones:             time.LoadLocation,
		retryScale:        1,
		checkURL:          func(u string) error { return ssrf.CheckURL(u, false) },
		requeue:           endpoints.NoRequeue,
		health:            endpoints.HealthConfig{Failures: endpoints.DefaultDisableAfterFailures, Failing: endpoints.DefaultDisableAfterFailing},
		queue:             outbox.EveryEvent{},
		rollups:           reports.InWrite{},
		writing:           conversions.InTransaction{},
		ids:               records.ShardZeroIDs{},
		writes:            webhooks.Batched{},
		secrets:           secretbox.Unwrapped{},
	}
	for _, o := range opts {
		o(&c)
	}
	s := &Service{DB: records.New(st, c.clock, c.ids)}
	var pace webhooks.Pacer
	if c.sharedPace {
		pace = ratelimit.NewShared(s.DB)
	}
	secrets := secretbox.New(st, c.secrets)
	s.Webhooks = webhooks.New(s.DB, webhooks.Config{Health: c.health, RetryScale: c.retryScale, DeliveryRetention: c.deliveryRetention, Writes: c.writes, Observer: c.observer, Pace: pace,
		Secrets: secrets})
	var notify func([]string)
	if p := c.pipeline; p != nil {
		s.Pipeline = webhooks.NewPipeline(s.Webhooks, p.sender, p.workers, p.log, p.opts...)
		notify = s.Pipeline.Queue
	}
	s.Events = outbox.NewWriter(s.DB, c.deliveryRetention, c.queue, notify)
	s.Identity = identity.New(s.DB, c.cacheTTL)
	s.Accounts = accounts.New(s.DB, s.Identity, password.Argon2id{})
	s.Limits = ratelimit.NewShared(s.DB)
	if c.localRates {
		s.Limits = ratelimit.NewLocal(c.clock)
	}
	s.Offers = offers.New(s.DB, c.cacheTTL)
	s.Partners = partners.New(s.DB, s.Events, s.Identity)
	s.Offers.WithPartners(s.Partners)
	s.Reports = reports.New(s.DB, c.zones)
	s.Clicks = clicks.New(s.DB, s.Events, s.Offers, s.Partners, c.rollups, c.cacheTTL, c.observer)
	s.Conversions = conversions.New(s.DB, s.Events, s.Offers, s.Partners, c.rollups, c.writing, c.observer)
	s.Endpoints = endpoints.New(s.DB, s.Events, s.Partners, c.checkURL, secrets)
	s.Deliveries = endpoints.NewLog(s.DB, s.Endpoints, c.deliveryRetention, c.requeue)
	s.Payouts = payouts.New(s.DB, s.Events, s.Partners)
	s.Portal = portalaccess.New(s.DB, s.Partners, s.Identity, password.Argon2id{})
	s.Audit = audit.NewLog(s.DB)
	return s
}

// API is what the HTTP API's routes and the dashboard's pages call.
func (s *Service) API() httpapi.Services {
	return httpapi.Services{
		Identity: s.Identity, Limits: s.Limits, Accounts: s.Accounts, Offers: s.Offers, Partners: s.Partners,
		Conversions: s.Conversions, Reports: s.Reports, Clicks: s.Clicks, Endpoints: s.Endpoints,
		Deliveries: s.Deliveries, Payouts: s.Payouts, Portal: s.Portal, Audit: s.Audit, Now: s.DB.Now, Store: s.DB,
	}
}

// OnAWS runs the Service as the AWS functions run their capabilities: laid
// out for DynamoDB (ForDynamoDB), with new conversions' and clicks'
// rollups and new conversions' events left to the table's stream. For the
// tests of the AWS path, which drive the functions' handlers with it.
func OnAWS() Option {
	return func(c *config) {
		for _, o := range []Option{ForDynamoDB(), WithStreamRollups(), WithStreamConversions(), WithSharedPace()} {
			o(c)
		}
	}
}
