// Package tracking is Tally's business logic: brands and API keys, offers,
// partners, conversions with idempotency and caps, hold-time approval,
// reports, rate limits, and the outbox of events. It talks only to the item
// store interface, so it runs the same on DynamoDB and on the embedded store.
package tracking

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// eventRetention is how long event items stay in the table at least; each
// delivery attempt reads the envelope from its event, so events stay as
// long as deliveries do (WithDeliveryRetention) when that is longer.
const eventRetention = 30 * 24 * time.Hour

// unknownKeyTTL is how long an instance takes a secret that matched no key
// as unknown. A key is created before it is handed out, so this only delays
// a key that a client guessed right before it existed.
const unknownKeyTTL = 5 * time.Second

// DefaultDeliveryRetention is how long a delivery and its attempts stay in
// the log after its last change, unless WithDeliveryRetention says otherwise.
const DefaultDeliveryRetention = 30 * 24 * time.Hour

// Service runs the business operations over a store.
type Service struct {
	db    *records.DB
	store store.Store
	now   func() time.Time

	// retryScale multiplies the webhook retry schedule: 1 in production,
	// small in tests that watch a whole schedule pass.
	retryScale float64
	// checkURL vets webhook receiver URLs (SSRF: https to public addresses
	// only, or loopback too on the local server).
	checkURL func(string) error
	// onEvent is told the events a transaction put into the outbox (the
	// local pipeline fans them out).
	onEvent func(eventIDs []string)
	// requeue hands a manually retried delivery to a transport that does
	// not watch the due index (the queue on AWS).
	requeue func(context.Context, DeliveryRef) error
	// health says when an endpoint is disabled.
	health healthConfig

	// rates counts requests in this process instead of the store, when this
	// process is the only one serving from the store.
	rates *processRates
	// streamRollups leaves new conversions' rollups to the stream
	// (WithStreamRollups).
	streamRollups bool
	// streamConversions writes new conversions for the stream's fan-out
	// (WithStreamConversions).
	streamConversions bool
	// partitioned: the store spreads writes by partition key (newID).
	partitioned bool
	// endpointless, when set, leaves the events of brands without
	// endpoints out of the outbox (WithOutboxOnlyForEndpoints).
	endpointless *endpointless

	offers      *records.Cache[offerEntry]
	offerBrands *records.Cache[string] // offer id → brand id; never changes
	// fraudConfigs are the brands' fraud settings and blocklists; a change
	// reaches other instances within offerTTL.
	fraudConfigs *records.Cache[fraudConfig]
	apiKeys      *records.Cache[apiKeyRecord]
	// postbackTokens are postback tokens by the hash of their secret.
	postbackTokens *records.Cache[postbackTokenRecord]
	// notingKeys holds the hashes of keys whose lastUsedAt this instance is
	// writing, so that concurrent requests write it once.
	notingKeys sync.Map
	// unknownKeys remembers secrets that match no key for a few seconds, so
	// a client repeating a wrong key costs no read per request.
	unknownKeys *records.Cache[struct{}]
	keyTTL      time.Duration
	offerTTL    time.Duration

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
	return func(s *Service) { s.checkURL = func(u string) error { return delivery.CheckURL(u, true) } }
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
func WithProcessRateLimits() Option { return func(s *Service) { s.rates = &processRates{} } }

// WithEndpointHealth sets when an endpoint (a webhook subscription or a
// partner's postback) is disabled: after failures consecutive failed
// attempts, or after failing for the duration failing with no success.
// Zero values keep the defaults.
func WithEndpointHealth(failures int, failing time.Duration) Option {
	return func(s *Service) {
		if failures > 0 {
			s.health.failures = int64(failures)
		}
		if failing > 0 {
			s.health.failing = failing
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
		health:            healthConfig{failures: DefaultDisableAfterFailures, failing: DefaultDisableAfterFailing},
		deliveryRetention: DefaultDeliveryRetention,
		checkURL:          func(u string) error { return delivery.CheckURL(u, false) },
		zones:             time.LoadLocation,
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
	s.offers = records.NewCache[offerEntry](s.offerTTL, s.now)
	s.offerBrands = records.NewCache[string](time.Hour, s.now)
	s.fraudConfigs = records.NewCache[fraudConfig](s.offerTTL, s.now)
	s.apiKeys = records.NewCache[apiKeyRecord](s.keyTTL, s.now)
	s.postbackTokens = records.NewCache[postbackTokenRecord](s.keyTTL, s.now)
	s.unknownKeys = records.NewCache[struct{}](min(s.keyTTL, unknownKeyTTL), s.now)
	return s
}

// Now returns the service's current time, in UTC to the millisecond.
func (s *Service) Now() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// eventEnvelope is a tally.Event whose data is not yet JSON, so that
// newEvent marshals the event in one pass: data marshalled first and put in
// as a json.RawMessage would be checked and compacted again.
type eventEnvelope struct {
	ID        string     `json:"id"`
	Event     string     `json:"event"`
	CreatedAt tally.Time `json:"createdAt"`
	BrandID   string     `json:"brandId"`
	Data      any        `json:"data"`
}

// newEvent builds the outbox item for an event, to be written in the same
// transaction as the change it reports.
func (s *Service) newEvent(brandID, name string, data any, at time.Time) (store.Op, error) {
	evt := eventEnvelope{ID: s.db.NewID("evt_", at), Event: name, CreatedAt: tally.NewTime(at), BrandID: brandID, Data: data}
	body, err := json.Marshal(evt)
	if err != nil {
		return store.Op{}, err
	}
	return store.Put(store.Item{
		Key:       keys.Event(evt.ID),
		GSI1:      store.IndexKey{PK: keys.EventsByBrand(brandID, keys.ShardOf(evt.ID)), SK: evt.ID},
		GSI3:      store.IndexKey{PK: keys.OutboxPK(keys.QueueShardOf(evt.ID)), SK: evt.ID},
		Attrs:     map[string]string{"type": name, "brandId": brandID},
		Data:      body,
		ExpiresAt: at.Add(max(eventRetention, s.deliveryRetention)).Unix(), // deliveries read their envelope from it
	}, store.NotExists()), nil
}

// Events returns a brand's events, newest first. The delivery pipeline reads
// events by id; this listing is for inspection and tests. It does not show
// the conversion.created events the fan-out makes (WithStreamConversions),
// which are in no index.
func (s *Service) Events(ctx context.Context, brandID string, p ListParams) ([]tally.Event, string, error) {
	parts := make([]records.Partition, keys.Shards)
	for i := range parts {
		parts[i] = records.Partition{Index: store.GSI1, PK: keys.EventsByBrand(brandID, i)}
	}
	return records.List[tally.Event](ctx, s.db, parts, p, nil)
}

// transact runs ops, retrying transaction conflicts with jittered backoff:
// they only mean another writer touched the same items at the same moment.
// Conflicts that outlast the budget answer 409, for the client to retry.
func (s *Service) transact(ctx context.Context, ops ...store.Op) error {
	for {
		write, brands := ops, []string(nil)
		if s.endpointless != nil {
			var err error
			if write, brands, err = s.unqueued(ctx, ops); err != nil {
				return err
			}
		}
		err := s.db.Transact(ctx, write...)
		if i, failed := store.FailedOp(err); failed && i >= len(ops) {
			s.gainedEndpoint(brands[i-len(ops)])
			continue // with the outbox this time
		}
		if err == nil && s.onEvent != nil {
			if ids := outboxed(write); len(ids) > 0 {
				s.onEvent(ids)
			}
		}
		return err
	}
}

// outboxed returns the ids of the events ops put into the outbox.
func outboxed(ops []store.Op) []string {
	var ids []string
	for _, op := range ops {
		if isOutboxed(op) {
			ids = append(ids, op.Item.GSI3.SK)
		}
	}
	return ids
}

// isOutboxed reports whether op puts an event into the outbox.
func isOutboxed(op store.Op) bool {
	return op.Kind == store.OpPut && strings.HasPrefix(op.Item.PK, "EVT#") && op.Item.GSI3.PK != ""
}
