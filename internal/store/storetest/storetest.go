// Package storetest is the conformance suite that every store.Store backend
// runs, pinning down the semantics documented in package store.
package storetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"github.com/tally-hq/tally/internal/store"
)

// Run runs the suite against stores made by newStore, which is called once
// per subtest and must arrange its own cleanup (t.Cleanup). The stores may
// share one table: every subtest writes only under its own partition keys
// (random per Run) and assumes nothing about other items. Subtests run in
// parallel; Run returns when all have finished.
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	var b [8]byte
	rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	tests := []struct {
		name string
		fn   func(t *testing.T, e *env)
	}{
		{"PutGet", testPutGet},
		{"PutReplaces", testPutReplaces},
		{"GetMissing", testGetMissing},
		{"Delete", testDelete},
		{"Query", testQuery},
		{"QueryDefaultLimit", testQueryDefaultLimit},
		{"QueryInvalid", testQueryInvalid},
		{"Paginate", testPaginate},
		{"PaginateIndex", testPaginateIndex},
		{"CursorPositional", testCursorPositional},
		{"CursorMisuse", testCursorMisuse},
		{"Index", testIndex},
		{"Conditions", testConditions},
		{"FailedOpIndex", testFailedOpIndex},
		{"Atomicity", testAtomicity},
		{"Update", testUpdate},
		{"UpdateKeepsItem", testUpdateKeepsItem},
		{"Invalid", testInvalid},
		{"MaxTransactOps", testMaxTransactOps},
		{"Canceled", testCanceled},
		{"RacePutNotExists", testRacePutNotExists},
		{"RaceCounter", testRaceCounter},
		{"RaceCappedCounter", testRaceCappedCounter},
		{"RaceClaimAndCount", testRaceClaimAndCount},
	}
	// The group makes Run wait for its parallel subtests, so callers may
	// tear down shared resources when it returns.
	t.Run("group", func(t *testing.T) {
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				tc.fn(t, &env{s: newStore(t), ctx: t.Context(), ns: run + "/" + tc.name})
			})
		}
	})
}

// env is one subtest's store and key namespace.
type env struct {
	s   store.Store
	ctx context.Context
	ns  string
}

// pk returns a partition key unique to this run and subtest.
func (e *env) pk(name string) string { return e.ns + "#" + name }

// key returns a key in partition pk(name).
func (e *env) key(name, sk string) store.Key { return store.Key{PK: e.pk(name), SK: sk} }

func (e *env) transact(t *testing.T, ops ...store.Op) {
	t.Helper()
	if err := e.s.Transact(e.ctx, ops...); err != nil {
		t.Fatalf("Transact: %v", err)
	}
}

// put writes items unconditionally, as few transactions as possible.
func (e *env) put(t *testing.T, items ...store.Item) {
	t.Helper()
	for chunk := range slices.Chunk(items, store.MaxTransactOps) {
		ops := make([]store.Op, len(chunk))
		for i, it := range chunk {
			ops[i] = store.Put(it)
		}
		e.transact(t, ops...)
	}
}

func (e *env) get(t *testing.T, k store.Key) store.Item {
	t.Helper()
	it, err := e.s.Get(e.ctx, k)
	if err != nil {
		t.Fatalf("Get(%q, %q): %v", k.PK, k.SK, err)
	}
	return it
}

// wantItem fails unless the item at want.Key equals want.
func (e *env) wantItem(t *testing.T, want store.Item) {
	t.Helper()
	if got := e.get(t, want.Key); !equal(got, want) {
		t.Errorf("Get(%q, %q):\n got %s\nwant %s", want.PK, want.SK, show(got), show(want))
	}
}

// wantMissing fails unless there is no item at k.
func (e *env) wantMissing(t *testing.T, k store.Key) {
	t.Helper()
	if it, err := e.s.Get(e.ctx, k); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(%q, %q) = %s, %v; want ErrNotFound", k.PK, k.SK, show(it), err)
	}
}

// query returns one page, failing the test on error.
func (e *env) query(t *testing.T, q store.Query) store.Page {
	t.Helper()
	p, err := e.s.Query(e.ctx, q)
	if err != nil {
		t.Fatalf("Query(%+v): %v", q, err)
	}
	return p
}

// queryAll follows cursors to the end and returns every item, checking
// that no page exceeds the limit.
func (e *env) queryAll(t *testing.T, q store.Query) []store.Item {
	t.Helper()
	var all []store.Item
	for range 1000 {
		p := e.query(t, q)
		if q.Limit > 0 && len(p.Items) > q.Limit {
			t.Fatalf("Query(%+v) returned %d items, over the limit", q, len(p.Items))
		}
		all = append(all, p.Items...)
		if p.Cursor == "" {
			return all
		}
		q.Cursor = p.Cursor
	}
	t.Fatalf("Query(%+v) did not end after 1000 pages", q)
	return nil
}

// sks returns the sort keys of items, in order.
func sks(items []store.Item) []string {
	s := make([]string, len(items))
	for i, it := range items {
		s[i] = it.SK
	}
	return s
}

// wantSKs fails unless items have exactly the sort keys want, in order.
func wantSKs(t *testing.T, what string, items []store.Item, want ...string) {
	t.Helper()
	if got := sks(items); !slices.Equal(got, want) {
		t.Errorf("%s: got sort keys %q, want %q", what, got, want)
	}
}

// wantCondFailed fails unless err reports a failed condition of op index.
func wantCondFailed(t *testing.T, what string, err error, index int) {
	t.Helper()
	var cf *store.ConditionFailedError
	if !errors.As(err, &cf) {
		t.Errorf("%s: got error %v, want ConditionFailedError{Index: %d}", what, err, index)
		return
	}
	if cf.Index != index {
		t.Errorf("%s: condition of op %d failed, want op %d", what, cf.Index, index)
	}
	if i, ok := store.FailedOp(err); !ok || i != index {
		t.Errorf("%s: FailedOp = %d, %v; want %d, true", what, i, ok, index)
	}
}

// wantRejected fails unless err is a validation error (store.ErrInvalid) and
// none of the store's outcome errors.
func wantRejected(t *testing.T, what string, err error) {
	t.Helper()
	_, cf := store.FailedOp(err)
	switch {
	case err == nil:
		t.Errorf("%s: got no error, want ErrInvalid", what)
	case !errors.Is(err, store.ErrInvalid), cf, errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrInvalidCursor):
		t.Errorf("%s: got %v, want ErrInvalid", what, err)
	}
}

// equal compares items, treating nil and empty maps and byte slices alike
// (backends need not tell them apart).
func equal(a, b store.Item) bool {
	return reflect.DeepEqual(normal(a), normal(b))
}

func normal(it store.Item) store.Item {
	if len(it.Attrs) == 0 {
		it.Attrs = nil
	}
	if len(it.Nums) == 0 {
		it.Nums = nil
	}
	if len(it.Bins) == 0 {
		it.Bins = nil
	}
	if len(it.Data) == 0 {
		it.Data = nil
	}
	return it
}

// show formats an item for failure messages.
func show(it store.Item) string {
	return fmt.Sprintf("{%q/%q gsi1=%q gsi2=%q gsi3=%q attrs=%q nums=%v bins=%q data=%q ttl=%d}",
		it.PK, it.SK, it.GSI1, it.GSI2, it.GSI3, it.Attrs, it.Nums, it.Bins, it.Data, it.ExpiresAt)
}

// clone returns a deep copy of it, so tests can keep an expectation while
// mutating what they handed to the store.
func clone(it store.Item) store.Item {
	it.Attrs = maps.Clone(it.Attrs)
	it.Nums = maps.Clone(it.Nums)
	if bins := it.Bins; bins != nil {
		it.Bins = make(map[string][]byte, len(bins))
		for name, v := range bins {
			it.Bins[name] = slices.Clone(v)
		}
	}
	it.Data = slices.Clone(it.Data)
	return it
}
