package outbox

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Queue says which events of a transaction enter the outbox index.
type Queue interface {
	// prepare returns ops as they are to be written, with the checks they
	// need appended (after the caller's ops, whose indexes in a condition
	// failure stay theirs) and the brands those checks are about, in
	// order.
	prepare(ctx context.Context, db *records.DB, ops []store.Op) (write []store.Op, checked []string, err error)
	// gained notes that a brand's check failed.
	gained(brandID string)
}

// EveryEvent puts every event into the outbox: where several processes
// share the store, or the table's stream feeds the engine.
type EveryEvent struct{}

func (EveryEvent) prepare(_ context.Context, _ *records.DB, ops []store.Op) ([]store.Op, []string, error) {
	return ops, nil, nil
}

func (EveryEvent) gained(string) {}

// OnlyForEndpoints writes the events of a brand that has never had a
// webhook subscription or a partner postback without their outbox entry:
// nothing would be delivered, and the pipeline would read each one and
// write it again only to take it out (on the embedded store, a quarter of a
// conversion's cost). Exact under concurrency: the brand's endpoints marker
// (keys.Endpoints) is counted up in the transaction that creates an
// endpoint (CountEndpoint), and a transaction that leaves an event out of
// the outbox holds only while the marker still counts none. It is for one
// process on its store (the embedded one): the brands found without
// endpoints are remembered in memory.
type OnlyForEndpoints struct {
	// brands remembers, per brand, whether its marker counted no endpoint
	// when last read. A brand that had one always has (the marker never
	// counts down), and one remembered without may have gained one since:
	// its transactions' checks find that out.
	brands sync.Map
}

// CountEndpoint counts a new endpoint of the brand (a subscription, or a
// postback set), in the transaction that creates it.
func CountEndpoint(brandID string) store.Op {
	return store.Increment(keys.Endpoints(brandID), map[string]int64{"n": 1})
}

// noEndpoints is the condition under which a brand's events may skip the
// outbox: its marker exists and counts none.
func noEndpoints(brandID string) store.Op {
	return store.Check(keys.Endpoints(brandID), store.Exists(), store.NumEquals("n", 0))
}

func (q *OnlyForEndpoints) prepare(ctx context.Context, db *records.DB, ops []store.Op) (out []store.Op, brands []string, err error) {
	for i := range ops {
		if !isQueued(&ops[i]) {
			continue
		}
		brandID := ops[i].Item.Attrs["brandId"]
		none, err := q.noEndpoints(ctx, db, brandID)
		if err != nil || !none {
			return ops, nil, err
		}
		if out == nil {
			out = append(make([]store.Op, 0, len(ops)+1), ops...)
		}
		out[i].Item.GSI3 = store.IndexKey{}
		if !slices.Contains(brands, brandID) {
			brands = append(brands, brandID)
		}
	}
	if out == nil {
		return ops, nil, nil
	}
	for _, b := range brands {
		out = append(out, noEndpoints(b))
	}
	return out, brands, nil
}

// noEndpoints reports whether the brand is remembered, or found, without
// endpoints. A brand whose marker was never written has had no endpoint:
// the marker is written counting none, unless an endpoint created
// meanwhile wrote it first.
func (q *OnlyForEndpoints) noEndpoints(ctx context.Context, db *records.DB, brandID string) (bool, error) {
	if v, ok := q.brands.Load(brandID); ok {
		return v.(bool), nil
	}
	for {
		it, err := db.Get(ctx, keys.Endpoints(brandID))
		if err == nil {
			none := it.Nums["n"] == 0
			q.brands.Store(brandID, none)
			return none, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
		err = db.Store.Transact(ctx, store.Put(store.Item{Key: keys.Endpoints(brandID)}, store.NotExists()))
		if _, raced := store.FailedOp(err); !raced && err != nil {
			return false, err
		}
		// Written now, or by an endpoint created meanwhile: read it.
	}
}

func (q *OnlyForEndpoints) gained(brandID string) { q.brands.Store(brandID, false) }
