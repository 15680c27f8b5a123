package records

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/store"
)

// Sleep waits d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Get reads the item at key and decodes its JSON body into a T.
func Get[T any](ctx context.Context, st store.Store, key store.Key) (T, error) {
	var v T
	it, err := st.Get(ctx, key)
	if err != nil {
		return v, err
	}
	return v, Decode(it, &v)
}

// GetByID reads one of a brand's records by its id: an id without the
// record type's prefix, or of another brand, is not found.
func GetByID[T any](ctx context.Context, st store.Store, what, prefix, id string, key func() store.Key) (T, error) {
	v, _, err := GetItemByID[T](ctx, st, what, prefix, id, key)
	return v, err
}

// GetItemByID is GetByID that also returns the item as read, for a change
// that keeps what is stored beside the record (its attributes).
func GetItemByID[T any](ctx context.Context, st store.Store, what, prefix, id string, key func() store.Key) (T, store.Item, error) {
	var v T
	if !ids.Valid(prefix, id) {
		return v, store.Item{}, NotFound(store.ErrNotFound, what, id)
	}
	it, err := st.Get(ctx, key())
	if err != nil {
		return v, it, NotFound(err, what, id)
	}
	return v, it, Decode(it, &v)
}

func Decode(it store.Item, v any) error {
	if err := json.Unmarshal(it.Data, v); err != nil {
		return fmt.Errorf("decode %s/%s: %w", it.PK, it.SK, err)
	}
	if r, ok := v.(ItemReader); ok {
		r.FromItem(it)
	}
	return nil
}

// ItemReader is a record that keeps fields outside its JSON body, in
// attributes that updates change in place.
type ItemReader interface{ FromItem(store.Item) }

// WholeReader is a record that gsi1 and gsi2 hold only in part (an
// attribute outside store.IndexAttrs): a list that reads it from them
// reads each record it keeps from the table too.
type WholeReader interface{ ReadWhole() }

func MustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only our own plain structs are marshalled here
	}
	return b
}

// NotFound maps a missing item to the API's 404.
func NotFound(err error, what, id string) error {
	if errors.Is(err, store.ErrNotFound) {
		return tally.Errorf(tally.ECodeNotFound, "No %s with id %q.", what, id)
	}
	return err
}

// Cache is a small per-instance read cache with a time-to-live.
type Cache[V any] struct {
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

func NewCache[V any](ttl time.Duration, now func() time.Time) *Cache[V] {
	return &Cache[V]{ttl: ttl, now: now, entries: map[string]cacheEntry[V]{}}
}

func (c *Cache[V]) Get(k string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || c.now().After(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *Cache[V]) Put(k string, v V) {
	c.PutUnless(k, v, func(V) bool { return false })
}

// Forget drops k, so the next get misses.
func (c *Cache[V]) Forget(k string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, k)
}

// PutUnless stores v unless the live entry for k is one keep wants kept.
func (c *Cache[V]) PutUnless(k string, v V, keep func(cached V) bool) {
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
