package tracking

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// WithOutboxOnlyForEndpoints writes the events of a brand that has never
// had a webhook subscription or a partner postback without their outbox
// entry: nothing would be delivered, and the pipeline would read each one
// and write it again only to take it out (the local server, where that is
// a quarter of a conversion's cost). Exact under concurrency: the brand's
// endpoints marker (endpointsKey) is counted up in the same transaction
// that creates an endpoint, and a transaction that leaves an event out of
// the outbox holds only while the marker still counts none. It is for one
// process on its store (the embedded one): the brands found without
// endpoints are remembered in memory.
func WithOutboxOnlyForEndpoints() Option {
	return func(s *Service) { s.endpointless = &endpointless{} }
}

// endpointless remembers, per brand, whether its marker counted no
// endpoint when last read. A brand that had one always has (the marker
// never counts down), and one remembered without may have gained one
// since: its transactions' checks find that out.
type endpointless struct{ brands sync.Map }

// countEndpoint counts a new endpoint of the brand (a subscription, or a
// postback set), in the transaction that creates it.
func countEndpoint(brandID string) store.Op {
	return store.Increment(keys.Endpoints(brandID), map[string]int64{"n": 1})
}

// noEndpoints is the condition under which a brand's events may skip the
// outbox: its marker exists and counts none.
func noEndpoints(brandID string) store.Op {
	return store.Check(keys.Endpoints(brandID), store.Exists(), store.NumEquals("n", 0))
}

// unqueued returns ops with the events of brands without endpoints put
// without their outbox entry, and a check per such brand appended (after
// the caller's ops, whose indexes in a condition failure stay theirs);
// brands are the brands checked, in the order of their checks. It returns
// ops itself when nothing changes.
func (s *Service) unqueued(ctx context.Context, ops []store.Op) (out []store.Op, brands []string, err error) {
	for i, op := range ops {
		if !isOutboxed(op) {
			continue
		}
		brandID := op.Item.Attrs["brandId"]
		none, err := s.noEndpoints(ctx, brandID)
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
// endpoints. A brand whose marker was never written (made before there
// were markers, or with no endpoint yet) is looked at: when it has neither
// a subscription nor a postback, the marker is written counting none,
// unless an endpoint created meanwhile wrote it first.
func (s *Service) noEndpoints(ctx context.Context, brandID string) (bool, error) {
	if v, ok := s.endpointless.brands.Load(brandID); ok {
		return v.(bool), nil
	}
	for {
		it, err := s.store.Get(ctx, keys.Endpoints(brandID))
		if err == nil {
			none := it.Nums["n"] == 0
			s.endpointless.brands.Store(brandID, none)
			return none, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return false, err
		}
		for _, prefix := range []string{keys.SubscriptionSKPrefix, keys.PostbackSKPrefix} {
			page, err := s.store.Query(ctx, store.Query{PK: keys.BrandPK(brandID), SKPrefix: prefix, Limit: 1})
			if err != nil {
				return false, err
			}
			if len(page.Items) > 0 {
				s.endpointless.brands.Store(brandID, false)
				return false, nil
			}
		}
		err = s.store.Transact(ctx, store.Put(store.Item{Key: keys.Endpoints(brandID)}, store.NotExists()))
		if _, raced := store.FailedOp(err); !raced && err != nil {
			return false, err
		}
		// Written now, or by an endpoint created meanwhile: read it.
	}
}

// gainedEndpoint notes that a brand's check failed: an endpoint was
// created since its marker was read.
func (s *Service) gainedEndpoint(brandID string) { s.endpointless.brands.Store(brandID, false) }
