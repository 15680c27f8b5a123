package webhooks

import (
	"context"
	"errors"
	"sync"

	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Reads holds what the fan-outs of one batch (a stream batch, a reconciler
// page) read once for all their events: each brand's subscriptions and
// each partner's postback. The events of a batch were written moments
// apart, and a fan-out reads its endpoints after its event was written
// either way, so one read serves them all. A failed read fails each
// fan-out that needs it in the batch; the next batch reads again. Safe for
// concurrent use.
type Reads struct {
	mu        sync.Mutex
	subs      map[string]*readOnce[[]endpoints.StoredSubscription]
	postbacks map[store.Key]*readOnce[store.Item] // the zero Item: none
}

// NewReads returns the reads of a new batch.
func NewReads() *Reads {
	return &Reads{subs: map[string]*readOnce[[]endpoints.StoredSubscription]{}, postbacks: map[store.Key]*readOnce[store.Item]{}}
}

type readOnce[T any] struct {
	once sync.Once
	v    T
	err  error
}

// once returns what read returns, reading at most once per key of m.
func once[K comparable, T any](mu *sync.Mutex, m map[K]*readOnce[T], k K, read func() (T, error)) (T, error) {
	mu.Lock()
	e, ok := m[k]
	if !ok {
		e = &readOnce[T]{}
		m[k] = e
	}
	mu.Unlock()
	e.once.Do(func() { e.v, e.err = read() })
	return e.v, e.err
}

// subscriptions is the brand's subscriptions, as stored.
func (r *Reads) subscriptions(ctx context.Context, db *records.DB, brandID string) ([]endpoints.StoredSubscription, error) {
	return once(&r.mu, r.subs, brandID, func() ([]endpoints.StoredSubscription, error) {
		return endpoints.Stored(ctx, db, brandID)
	})
}

// postback is the partner's postback item (ok false: it has none).
func (r *Reads) postback(ctx context.Context, db *records.DB, brandID, partnerID string) (store.Item, bool, error) {
	key := keys.Postback(brandID, partnerID)
	it, err := once(&r.mu, r.postbacks, key, func() (store.Item, error) {
		it, err := db.Get(ctx, key)
		if errors.Is(err, store.ErrNotFound) {
			return store.Item{}, nil
		}
		return it, err
	})
	return it, it.Key == key, err
}
