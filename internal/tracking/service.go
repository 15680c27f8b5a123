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
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/store"
)

// eventRetention is how long event items stay in the table; delivery reads
// them within seconds, the rest is for inspection.
const eventRetention = 30 * 24 * time.Hour

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
	// onEvent is told when a transaction wrote events (the local pipeline
	// wakes up).
	onEvent func()
	// requeue hands a manually retried delivery to a transport that does
	// not watch the due index (the queue on AWS).
	requeue func(context.Context, DeliveryRef) error

	offers   *cache[tally.Offer]
	apiKeys  *cache[apiKeyRecord]
	keyTTL   time.Duration
	offerTTL time.Duration
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

// New returns a Service over st.
func New(st store.Store, opts ...Option) *Service {
	s := &Service{
		store:      st,
		now:        time.Now,
		keyTTL:     30 * time.Second,
		offerTTL:   30 * time.Second,
		retryScale: 1,
		checkURL:   func(u string) error { return delivery.CheckURL(u, false) },
	}
	for _, o := range opts {
		o(s)
	}
	s.offers = newCache[tally.Offer](s.offerTTL, s.now)
	s.apiKeys = newCache[apiKeyRecord](s.keyTTL, s.now)
	return s
}

// Now returns the service's current time, in UTC to the millisecond.
func (s *Service) Now() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// newEvent builds the outbox item for an event, to be written in the same
// transaction as the change it reports.
func (s *Service) newEvent(brandID, name string, data any, at time.Time) (store.Op, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return store.Op{}, err
	}
	evt := tally.Event{ID: ids.New("evt_", at), Event: name, CreatedAt: tally.NewTime(at), BrandID: brandID, Data: raw}
	body, err := json.Marshal(evt)
	if err != nil {
		return store.Op{}, err
	}
	return store.Put(store.Item{
		Key:       eventKey(evt.ID),
		GSI1:      store.IndexKey{PK: eventsByBrand(brandID, shardOf(evt.ID)), SK: evt.ID},
		GSI3:      store.IndexKey{PK: outboxPK(shardOf(evt.ID)), SK: evt.ID},
		Attrs:     map[string]string{"type": name, "brandId": brandID},
		Data:      body,
		ExpiresAt: at.Add(eventRetention).Unix(),
	}, store.NotExists()), nil
}

// Events returns a brand's events, newest first. The delivery pipeline reads
// events by id; this listing is for inspection and tests.
func (s *Service) Events(ctx context.Context, brandID string, p ListParams) ([]tally.Event, string, error) {
	parts := make([]partition, shards)
	for i := range parts {
		parts[i] = partition{index: store.GSI1, pk: eventsByBrand(brandID, i)}
	}
	return list[tally.Event](ctx, s.store, parts, p, nil)
}

// transact runs ops, retrying transaction conflicts with jittered backoff:
// they only mean another writer touched the same items at the same moment.
func (s *Service) transact(ctx context.Context, ops ...store.Op) error {
	backoff := 5 * time.Millisecond
	for attempt := 0; ; attempt++ {
		err := s.store.Transact(ctx, ops...)
		if err == nil && s.onEvent != nil && slices.ContainsFunc(ops, isEvent) {
			s.onEvent()
		}
		if !errors.Is(err, store.ErrConflict) || attempt == 12 {
			return err
		}
		if err := sleep(ctx, backoff/2+rand.N(backoff)); err != nil {
			return err
		}
		backoff = min(backoff*2, 200*time.Millisecond)
	}
}

func isEvent(op store.Op) bool {
	return op.Kind == store.OpPut && strings.HasPrefix(op.Item.PK, "EVT#")
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

func decode(it store.Item, v any) error {
	if err := json.Unmarshal(it.Data, v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", it.PK, it.SK, err)
	}
	return nil
}

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
