// Package tracking is Tally's business logic: brands and API keys, offers,
// partners, conversions with idempotency and caps, hold-time approval,
// reports, rate limits, and the outbox of events. It talks only to the item
// store interface, so it runs the same on DynamoDB and on the embedded store.
package tracking

import (
	"context"
	"log/slog"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/ssrf"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/webhooks"
)

// unknownKeyTTL is how long an instance takes a secret that matched no key
// as unknown. A key is created before it is handed out, so this only delays
// a key that a client guessed right before it existed.
const unknownKeyTTL = 5 * time.Second

// DefaultDeliveryRetention is how long a delivery and its attempts stay in
// the log after its last change, unless WithDeliveryRetention says otherwise.
const DefaultDeliveryRetention = 30 * 24 * time.Hour

// Service runs the business operations over a store.
type Service struct {
	*identityService
	*accountsService
	*offersService
	*partnersService
	*reportsService
	*clicksService
	*conversionsService
	*endpointsService
	*webhooksEngine
	*webhooksLog
	limiter

	db    *records.DB
	store store.Store
	now   func() time.Time

	// retryScale multiplies the webhook retry schedule: 1 in production,
	// small in tests that watch a whole schedule pass.
	retryScale float64
	// checkURL vets webhook receiver URLs (SSRF: https to public addresses
	// only, or loopback too on the local server).
	checkURL func(string) error
	// events writes every transaction, and the events in them.
	events *outbox.Writer
	queue  outbox.Queue
	// onEvent is told the events a transaction put into the outbox (the
	// local pipeline fans them out).
	onEvent func(eventIDs []string)
	// requeue hands a manually retried delivery to a transport that does
	// not watch the due index (the queue on AWS).
	requeue endpoints.Requeue
	// health says when an endpoint is disabled.
	health endpoints.HealthConfig

	// localRates counts rate limits in this process (WithProcessRateLimits).
	localRates bool
	// rollups is how new conversions' and clicks' rollups are kept.
	rollups reports.Rollups
	// writing is how new conversions are written.
	writing conversions.Writing
	// partitioned: the store spreads writes by partition key (newID).
	partitioned bool

	keyTTL   time.Duration
	offerTTL time.Duration

	// deliveryRetention is how long a delivery stays after its last change.
	deliveryRetention time.Duration
	// zones loads the IANA time zones that reports bucket days in.
	zones func(name string) (*time.Location, error)
}

// ListParams are the paging parameters of every list.
type ListParams = records.ListParams

// Page sizes of every list.
const (
	DefaultLimit = records.DefaultLimit
	MaxLimit     = records.MaxLimit
)

// The capabilities the Service is made of (their methods are its own until
// the wiring hands each out by itself).
type (
	identityService    = identity.Service
	accountsService    = accounts.Service
	offersService      = offers.Service
	partnersService    = partners.Service
	reportsService     = reports.Service
	clicksService      = clicks.Service
	conversionsService = conversions.Service
	endpointsService   = endpoints.Service
	webhooksEngine     = webhooks.Engine
	webhooksLog        = endpoints.Log
)

// limiter counts requests against rate limits (package ratelimit).
type limiter interface {
	Allow(ctx context.Context, bucket string, limit int) (ratelimit.Decision, error)
	AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (ratelimit.Decision, error)
}

// RateDecision is the outcome of counting one request against a limit.
type RateDecision = ratelimit.Decision

// Principal is who a request acts for.
type Principal = identity.Principal

// Transitional names of moved types, for the packages that use them.
type (
	APIKeyInput          = identity.APIKeyInput
	CreatedAPIKey        = identity.CreatedAPIKey
	CreatedPostbackToken = identity.CreatedPostbackToken
	UserInput            = accounts.UserInput
	OfferInput           = offers.OfferInput
	OfferPatch           = offers.OfferPatch
	ApplicationInput     = partners.ApplicationInput
	ReportQuery          = reports.ReportQuery
	Report               = reports.Report
	StreamChange         = reports.StreamChange
	ClickInput           = clicks.ClickInput
	ClickFilter          = clicks.ClickFilter
	FraudSettingsInput   = clicks.FraudSettingsInput
	AutoBanInput         = clicks.AutoBanInput
	BlockedIPInput       = clicks.BlockedIPInput
	ConversionInput      = conversions.ConversionInput
	ConversionFilter     = conversions.ConversionFilter
	InboundPostback      = conversions.InboundPostback
	SubscriptionInput    = endpoints.SubscriptionInput
	PostbackInput        = endpoints.PostbackInput
	Session              = accounts.Session
	DeliveryRef          = endpoints.DeliveryRef
	DeliveryMessage      = webhooks.DeliveryMessage
	DeliveryFilter       = endpoints.DeliveryFilter
	AttemptResult        = webhooks.AttemptResult
	Sender               = webhooks.Sender
	RecoverInput         = endpoints.RecoverInput
	Recovery             = endpoints.Recovery
	Pipeline             = webhooks.Pipeline
	PipelineOption       = webhooks.PipelineOption
	Release              = webhooks.Release
)

// Transitional names of moved values.
var (
	RetrySchedule = webhooks.RetrySchedule
	SharedStore   = webhooks.SharedStore
)

// MaxAttempts is attempt 1 plus the retries.
const MaxAttempts = webhooks.MaxAttempts

// NewPipeline returns the local pipeline over the Service's engine, told
// of the events this Service writes.
func (s *Service) NewPipeline(sender Sender, workers int, log *slog.Logger, opts ...PipelineOption) *Pipeline {
	p := webhooks.NewPipeline(s.webhooksEngine, sender, workers, log, opts...)
	s.onEvent = p.Queue
	return p
}

// SessionTTL is how long a dashboard session lasts.
const SessionTTL = accounts.SessionTTL

// ErrUnauthorized answers every request without a valid API key.
var ErrUnauthorized = identity.ErrUnauthorized

// Option configures a Service.
type Option func(*Service)

// WithClock replaces the wall clock, for tests.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithCacheTTL sets how long an instance trusts its cached API keys and
// offers. A revoked key keeps working on an instance for at most this long.
func WithCacheTTL(d time.Duration) Option {
	return func(s *Service) { s.keyTTL, s.offerTTL = d, d }
}

// WithDeliveryRetention sets how long a delivery and its attempts stay in
// the log after its last change (the table's TTL removes them then).
func WithDeliveryRetention(d time.Duration) Option {
	return func(s *Service) { s.deliveryRetention = d }
}

// WithZones loads reports' time zones with load instead of
// time.LoadLocation (on Lambda, where the system has no zone database).
func WithZones(load func(name string) (*time.Location, error)) Option {
	return func(s *Service) { s.zones = load }
}

// WithRetryScale multiplies the webhook retry schedule's waits by f.
func WithRetryScale(f float64) Option { return func(s *Service) { s.retryScale = f } }

// WithLoopbackReceivers lets webhook subscriptions point at loopback
// addresses, for the local server where developers run their receivers.
func WithLoopbackReceivers() Option {
	return func(s *Service) { s.checkURL = func(u string) error { return ssrf.CheckURL(u, true) } }
}

// WithRequeue hands deliveries that a manual retry made pending again to
// queue (on AWS, the delivery queue; the local pipeline needs none).
func WithRequeue(queue func(context.Context, DeliveryRef) error) Option {
	return func(s *Service) { s.requeue = queue }
}

// WithProcessRateLimits counts rate limits in this process's memory rather
// than in the store. It is exact only when no other process serves from the
// same store, which holds for the embedded store (its file is locked to one
// process); it spares every request a write, and so a commit, to the store.
// A restart forgets the current minute's counts.
func WithProcessRateLimits() Option { return func(s *Service) { s.localRates = true } }

// WithEndpointHealth sets when an endpoint (a webhook subscription or a
// partner's postback) is disabled: after failures consecutive failed
// attempts, or after failing for the duration failing with no success.
// Zero values keep the defaults.
func WithEndpointHealth(failures int, failing time.Duration) Option {
	return func(s *Service) {
		if failures > 0 {
			s.health.Failures = int64(failures)
		}
		if failing > 0 {
			s.health.Failing = failing
		}
	}
}

// New returns a Service over st.
func New(st store.Store, opts ...Option) *Service {
	s := &Service{
		store:             st,
		now:               time.Now,
		keyTTL:            30 * time.Second,
		offerTTL:          30 * time.Second,
		retryScale:        1,
		health:            endpoints.HealthConfig{Failures: endpoints.DefaultDisableAfterFailures, Failing: endpoints.DefaultDisableAfterFailing},
		deliveryRetention: DefaultDeliveryRetention,
		checkURL:          func(u string) error { return ssrf.CheckURL(u, false) },
		zones:             time.LoadLocation,
		queue:             outbox.EveryEvent{},
		rollups:           reports.InWrite{},
		writing:           conversions.InTransaction{},
		requeue:           endpoints.NoRequeue,
	}
	_, s.partitioned = st.(store.Partitioned)
	for _, o := range opts {
		o(s)
	}
	var ids records.IDs = records.ShardZeroIDs{}
	if s.partitioned {
		ids = records.SpreadIDs{}
	}
	s.db = records.New(st, s.now, ids)
	s.events = outbox.NewWriter(s.db, s.deliveryRetention, s.queue, func(ids []string) {
		if s.onEvent != nil {
			s.onEvent(ids)
		}
	})
	s.identityService = identity.New(s.db, s.keyTTL)
	s.accountsService = accounts.New(s.db, s.identityService)
	s.offersService = offers.New(s.db, s.offerTTL)
	s.partnersService = partners.New(s.db, s.events, s.identityService)
	s.reportsService = reports.New(s.db, s.zones)
	s.clicksService = clicks.New(s.db, s.events, s.offersService, s.partnersService, s.rollups, s.offerTTL)
	s.conversionsService = conversions.New(s.db, s.events, s.offersService, s.partnersService, s.rollups, s.writing)
	s.endpointsService = endpoints.New(s.db, s.events, s.partnersService, s.checkURL)
	var writes webhooks.FanOutWrites = webhooks.Batched{}
	if s.partitioned {
		writes = webhooks.Apart{}
	}
	s.webhooksEngine = webhooks.New(s.db, webhooks.Config{Health: s.health, RetryScale: s.retryScale, DeliveryRetention: s.deliveryRetention, Writes: writes})
	s.webhooksLog = endpoints.NewLog(s.db, s.endpointsService, s.deliveryRetention, s.requeue)
	s.limiter = ratelimit.NewShared(s.db)
	if s.localRates {
		s.limiter = ratelimit.NewLocal(s.now)
	}
	return s
}

// Now returns the service's current time, in UTC to the millisecond.
func (s *Service) Now() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// Events returns a brand's events, newest first (outbox.Writer.Events).
func (s *Service) Events(ctx context.Context, brandID string, p ListParams) ([]tally.Event, string, error) {
	return s.events.Events(ctx, brandID, p)
}

// WithStreamRollups leaves new conversions' and clicks' rollups to the
// table's stream (reports.FromStream): the AWS functions, where the rollup
// function reads the stream.
func WithStreamRollups() Option { return func(s *Service) { s.rollups = reports.FromStream{} } }

// WithStreamConversions writes new conversions for the table's stream
// (conversions.ForStream): the AWS functions.
func WithStreamConversions() Option { return func(s *Service) { s.writing = conversions.ForStream{} } }
