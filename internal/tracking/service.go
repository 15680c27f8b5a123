// Package tracking is Tally's business logic: brands and API keys, offers,
// partners, conversions with idempotency and caps, hold-time approval,
// reports, rate limits, and the outbox of events. It talks only to the item
// store interface, so it runs the same on DynamoDB and on the embedded store.
package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/ids"
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

	offers      *cache[offerEntry]
	offerBrands *cache[string] // offer id → brand id; never changes
	// fraudConfigs are the brands' fraud settings and blocklists; a change
	// reaches other instances within offerTTL.
	fraudConfigs *cache[fraudConfig]
	apiKeys      *cache[apiKeyRecord]
	// postbackTokens are postback tokens by the hash of their secret.
	postbackTokens *cache[postbackTokenRecord]
	// notingKeys holds the hashes of keys whose lastUsedAt this instance is
	// writing, so that concurrent requests write it once.
	notingKeys sync.Map
	cursorKeys keyringCache // signs list cursors
	// unknownKeys remembers secrets that match no key for a few seconds, so
	// a client repeating a wrong key costs no read per request.
	unknownKeys *cache[struct{}]
	keyTTL      time.Duration
	offerTTL    time.Duration

	// deliveryRetention is how long a delivery stays after its last change.
	deliveryRetention time.Duration
	// zones loads the IANA time zones that reports bucket days in.
	zones func(name string) (*time.Location, error)
}

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
	s.offers = newCache[offerEntry](s.offerTTL, s.now)
	s.offerBrands = newCache[string](time.Hour, s.now)
	s.fraudConfigs = newCache[fraudConfig](s.offerTTL, s.now)
	s.apiKeys = newCache[apiKeyRecord](s.keyTTL, s.now)
	s.postbackTokens = newCache[postbackTokenRecord](s.keyTTL, s.now)
	s.unknownKeys = newCache[struct{}](min(s.keyTTL, unknownKeyTTL), s.now)
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
	evt := eventEnvelope{ID: s.newID("evt_", at), Event: name, CreatedAt: tally.NewTime(at), BrandID: brandID, Data: data}
	body, err := json.Marshal(evt)
	if err != nil {
		return store.Op{}, err
	}
	return store.Put(store.Item{
		Key:       eventKey(evt.ID),
		GSI1:      store.IndexKey{PK: eventsByBrand(brandID, shardOf(evt.ID)), SK: evt.ID},
		GSI3:      store.IndexKey{PK: outboxPK(queueShardOf(evt.ID)), SK: evt.ID},
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
	parts := make([]partition, shards)
	for i := range parts {
		parts[i] = partition{index: store.GSI1, pk: eventsByBrand(brandID, i)}
	}
	return list[tally.Event](ctx, s, parts, p, nil)
}

// conflictBudget is how long transact keeps retrying conflicts. Hundreds of
// writers on one hot item (a cap counter, a rollup) need many rounds on a
// busy table; a count of attempts ran out where time would not have.
const conflictBudget = 5 * time.Second

// transact runs ops, retrying transaction conflicts with jittered backoff:
// they only mean another writer touched the same items at the same moment.
// Conflicts that outlast the budget answer 409, for the client to retry.
func (s *Service) transact(ctx context.Context, ops ...store.Op) error {
	backoff := 5 * time.Millisecond
	start := time.Now()
	for {
		write, brands := ops, []string(nil)
		if s.endpointless != nil {
			var err error
			if write, brands, err = s.unqueued(ctx, ops); err != nil {
				return err
			}
		}
		err := s.store.Transact(ctx, write...)
		if i, failed := store.FailedOp(err); failed && i >= len(ops) {
			s.gainedEndpoint(brands[i-len(ops)])
			continue // with the outbox this time
		}
		if err == nil && s.onEvent != nil {
			if ids := outboxed(write); len(ids) > 0 {
				s.onEvent(ids)
			}
		}
		if !errors.Is(err, store.ErrConflict) {
			return err
		}
		if time.Since(start) > conflictBudget {
			return fmt.Errorf("%w: %w", tally.Errorf(tally.ECodeConflict, "Other requests kept changing the same records; retry the request."), err)
		}
		if err := sleep(ctx, backoff/2+rand.N(backoff)); err != nil {
			return err
		}
		backoff = min(backoff*2, 200*time.Millisecond)
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

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// getRecord reads the item at key and decodes its JSON body into a T.
func getRecord[T any](ctx context.Context, st store.Store, key store.Key) (T, error) {
	var v T
	it, err := st.Get(ctx, key)
	if err != nil {
		return v, err
	}
	return v, decode(it, &v)
}

// getByID reads one of a brand's records by its id: an id without the
// record type's prefix, or of another brand, is not found.
func getByID[T any](ctx context.Context, st store.Store, what, prefix, id string, key func() store.Key) (T, error) {
	if !ids.Valid(prefix, id) {
		var zero T
		return zero, notFound(store.ErrNotFound, what, id)
	}
	v, err := getRecord[T](ctx, st, key())
	return v, notFound(err, what, id)
}

func decode(it store.Item, v any) error {
	if err := json.Unmarshal(it.Data, v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", it.PK, it.SK, err)
	}
	if r, ok := v.(itemReader); ok {
		r.fromItem(it)
	}
	return nil
}

// itemReader is a record that keeps fields outside its JSON body, in
// attributes that updates change in place.
type itemReader interface{ fromItem(store.Item) }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs are marshalled here
	}
	return b
}

// notFound maps a missing item to the API's 404.
func notFound(err error, what, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return tally.Errorf(tally.ECodeNotFound, "No %s with id %q.", what, id)
	}
	return err
}

// cache is a small per-instance read cache with a time-to-live.
type cache[V any] struct {
	mu      sync.Mutex
	ttl     time.Duration
	now     func() time.Time
	entries map[string]cacheEntry[V]
}

type cacheEntry[V any] struct {
	v       V
	expires time.Time
}

// cacheMax bounds memory; past it the cache starts over, which costs only reads.
const cacheMax = 10_000

func newCache[V any](ttl time.Duration, now func() time.Time) *cache[V] {
	return &cache[V]{ttl: ttl, now: now, entries: map[string]cacheEntry[V]{}}
}

func (c *cache[V]) get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || c.now().After(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *cache[V]) put(k string, v V) {
	c.putUnless(k, v, func(V) bool { return false })
}

// forget drops k, so the next get misses.
func (c *cache[V]) forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, k)
}

// putUnless stores v unless the live entry for k is one keep wants kept.
func (c *cache[V]) putUnless(k string, v V, keep func(cached V) bool) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok && !c.now().After(e.expires) && keep(e.v) {
		return
	}
	if len(c.entries) >= cacheMax {
		clear(c.entries)
	}
	c.entries[k] = cacheEntry[V]{v: v, expires: c.now().Add(c.ttl)}
}
