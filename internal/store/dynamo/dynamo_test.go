package dynamo_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/store/storetest"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

func newStore(t *testing.T) *dynamo.Store {
	client, table := dynamotest.NewTable(t)
	return dynamo.New(client, table)
}

func TestConformance(t *testing.T) {
	// One table for the whole suite, which keeps its subtests apart by key.
	s := newStore(t)
	storetest.Run(t, func(*testing.T) store.Store { return s })
}

func key(pk, sk string) store.Key { return store.Key{PK: pk, SK: sk} }

func put(t *testing.T, s store.Store, items ...store.Item) {
	t.Helper()
	ops := make([]store.Op, len(items))
	for i, it := range items {
		ops[i] = store.Put(it)
	}
	if err := s.Transact(t.Context(), ops...); err != nil {
		t.Fatalf("Transact: %v", err)
	}
}

func sortKeys(items []store.Item) []string {
	var sks []string
	for _, it := range items {
		sks = append(sks, it.SK)
	}
	return sks
}

// TestPagination checks more than the suite does: the suite lets a page that
// ends its partition carry a cursor, as DynamoDB's own pages may; this backend
// reads one item ahead so that such a page has none.
func TestPagination(t *testing.T) {
	s := newStore(t)
	var items []store.Item
	for i := range 7 {
		items = append(items, store.Item{
			Key:  key("p", fmt.Sprintf("s%d", i)),
			GSI1: store.IndexKey{PK: "ix", SK: "same"}, // equal index sort keys still page correctly
		})
	}
	put(t, s, items...)

	for _, q := range []store.Query{
		{PK: "p", Limit: 3},
		{PK: "p", Limit: 7}, // a page that ends the partition has no cursor
		{PK: "p", Limit: 2, Desc: true},
		{Index: store.GSI1, PK: "ix", Limit: 3},
	} {
		var got []string
		pages := 0
		for {
			page, err := s.Query(t.Context(), q)
			if err != nil {
				t.Fatalf("Query(%+v): %v", q, err)
			}
			pages++
			got = append(got, sortKeys(page.Items)...)
			if page.Cursor == "" {
				break
			}
			q.Cursor = page.Cursor
		}
		if wantPages := (7 + q.Limit - 1) / q.Limit; pages != wantPages || len(got) != 7 {
			t.Errorf("Query(%+v): %d pages with %q, want %d pages with 7 items", q, pages, got, wantPages)
		}
		slices.Sort(got)
		if !slices.Equal(slices.Compact(got), sortKeys(items)) {
			t.Errorf("Query(%+v) read %q, want each item once", q, got)
		}
	}
}

// TestCursorRejected adds to the suite's cases cursors of the right partition
// but outside the query's sort key range, which DynamoDB would answer with a
// ValidationException.
func TestCursorRejected(t *testing.T) {
	s := newStore(t)
	put(t, s,
		store.Item{Key: key("p", "a1"), GSI1: store.IndexKey{PK: "p", SK: "a1"}},
		store.Item{Key: key("p", "a2"), GSI1: store.IndexKey{PK: "p", SK: "a2"}},
	)
	page, err := s.Query(t.Context(), store.Query{PK: "p", Limit: 1})
	if err != nil || page.Cursor == "" {
		t.Fatalf("Query = %+v, %v; want a cursor", page, err)
	}
	for _, q := range []store.Query{
		{PK: "p", Cursor: "not a cursor!"},
		{PK: "p", Cursor: "e30"}, // "{}"
		{PK: "other", Cursor: page.Cursor},
		{Index: store.GSI1, PK: "p", Cursor: page.Cursor},
		{PK: "p", SKPrefix: "b", Cursor: page.Cursor},
		{PK: "p", SKFrom: "a2", Cursor: page.Cursor},
	} {
		if _, err := s.Query(t.Context(), q); !errors.Is(err, store.ErrInvalidCursor) {
			t.Errorf("Query(%+v) error = %v, want ErrInvalidCursor", q, err)
		}
	}
}

// fakeAPI answers every call with err, counting the calls.
type fakeAPI struct {
	err   error
	calls int
}

func (f *fakeAPI) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.calls++
	return nil, f.err
}

func (f *fakeAPI) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	f.calls++
	return nil, f.err
}

func (f *fakeAPI) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	f.calls++
	return nil, f.err
}

func (f *fakeAPI) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	f.calls++
	return nil, f.err
}

func (f *fakeAPI) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	f.calls++
	return nil, f.err
}

func (f *fakeAPI) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	f.calls++
	return nil, f.err
}

func canceled(codes ...string) error {
	e := &types.TransactionCanceledException{}
	for _, c := range codes {
		e.CancellationReasons = append(e.CancellationReasons, types.CancellationReason{Code: aws.String(c)})
	}
	return e
}

func TestErrorMapping(t *testing.T) {
	ops := []store.Op{store.Check(key("p", "1"), store.Exists()), store.Check(key("p", "2"), store.Exists()), store.Check(key("p", "3"), store.Exists())}
	for _, tc := range []struct {
		err      error
		failedOp int // -1: none
		conflict bool
	}{
		{canceled("None", "ConditionalCheckFailed", "ConditionalCheckFailed"), 1, false},
		{canceled("TransactionConflict", "None", "ConditionalCheckFailed"), 2, false},
		{canceled("None", "TransactionConflict", "None"), -1, true},
		{&types.TransactionConflictException{}, -1, true},
		{canceled("ThrottlingError", "None", "None"), -1, false},
		{&types.TransactionInProgressException{}, -1, false},
		{errors.New("boom"), -1, false},
	} {
		err := dynamo.New(&fakeAPI{err: tc.err}, "t").Transact(t.Context(), ops...)
		i, failed := store.FailedOp(err)
		if !failed {
			i = -1
		}
		if err == nil || i != tc.failedOp || errors.Is(err, store.ErrConflict) != tc.conflict {
			t.Errorf("Transact with %v: got %v, want failed op %d, conflict %v", tc.err, err, tc.failedOp, tc.conflict)
		}
	}

	// A single put, update or delete is one conditional write, not a
	// transaction: its errors are mapped the same way.
	for _, op := range []store.Op{store.Put(store.Item{Key: key("p", "1")}, store.NotExists()), store.Increment(key("p", "1"), map[string]int64{"n": 1}), store.Delete(key("p", "1"), store.Exists())} {
		if err := dynamo.New(&fakeAPI{err: &types.ConditionalCheckFailedException{}}, "t").Transact(t.Context(), op); !isFailedOp(err, 0) {
			t.Errorf("Transact(kind %d) with ConditionalCheckFailedException: got %v, want operation 0 failed", op.Kind, err)
		}
		if err := dynamo.New(&fakeAPI{err: &types.TransactionConflictException{}}, "t").Transact(t.Context(), op); !errors.Is(err, store.ErrConflict) {
			t.Errorf("Transact(kind %d) with TransactionConflictException: got %v, want ErrConflict", op.Kind, err)
		}
	}

	incr := store.Increment(key("p", "1"), map[string]int64{"n": 1})
	if _, err := dynamo.New(&fakeAPI{err: &types.ConditionalCheckFailedException{}}, "t").Update(t.Context(), incr); !isFailedOp(err, 0) {
		t.Errorf("Update with ConditionalCheckFailedException: got %v, want operation 0 failed", err)
	}
	if _, err := dynamo.New(&fakeAPI{err: &types.TransactionConflictException{}}, "t").Update(t.Context(), incr); !errors.Is(err, store.ErrConflict) {
		t.Errorf("Update with TransactionConflictException: got %v, want ErrConflict", err)
	}
}

func isFailedOp(err error, index int) bool {
	i, ok := store.FailedOp(err)
	return ok && i == index
}

func TestInvalidRequestsMakeNoCall(t *testing.T) {
	api := &fakeAPI{err: errors.New("must not be called")}
	s := dynamo.New(api, "t")
	k := key("p", "s")
	tooMany := make([]store.Op, store.MaxTransactOps+1)
	for i := range tooMany {
		tooMany[i] = store.Delete(key("p", fmt.Sprint(i)))
	}
	for name, ops := range map[string][]store.Op{
		"none":            nil,
		"too many":        tooMany,
		"same key twice":  {store.Delete(k), store.Check(k, store.Exists())},
		"empty key":       {store.Delete(key("p", ""))},
		"reserved attr":   {store.Put(store.Item{Key: k, Attrs: map[string]string{"ttl": "1"}})},
		"reserved num":    {store.Increment(k, map[string]int64{"data": 1})},
		"reserved cond":   {store.Check(k, store.AttrEquals("pk", "p"))},
		"attr and num":    {store.Put(store.Item{Key: k, Attrs: map[string]string{"a": "1"}, Nums: map[string]int64{"a": 1}})},
		"half index key":  {store.Put(store.Item{Key: k, GSI2: store.IndexKey{PK: "x"}})},
		"invalid UTF-8":   {store.Put(store.Item{Key: k, Attrs: map[string]string{"a": "\xff"}})},
		"0x00 in key":     {store.Delete(key("p\x00", "s"))},
		"unknown kind":    {{Kind: 99, Key: k}},
		"unknown cond":    {store.Check(k, store.Cond{Kind: 99})},
		"empty attr name": {store.Check(k, store.NumLess("", 1))},
		"long sort key":   {store.Delete(key("p", strings.Repeat("x", 1025)))},
		"long index key":  {store.Put(store.Item{Key: k, GSI1: store.IndexKey{PK: strings.Repeat("x", 2049), SK: "s"}})},
	} {
		if err := s.Transact(t.Context(), ops...); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Transact(%s): got %v, want ErrInvalid", name, err)
		}
	}
	for _, q := range []store.Query{
		{},
		{Index: "gsi9", PK: "p"},
		{PK: "p", Limit: -1},
		{PK: "p", Limit: 1001},
		{PK: "p", SKPrefix: "a", SKTo: "b"},
		{PK: "p", SKFrom: "b", SKTo: "a"},
	} {
		if _, err := s.Query(t.Context(), q); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("Query(%+v): got %v, want ErrInvalid", q, err)
		}
	}
	if _, err := s.Get(t.Context(), key("", "s")); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Get with an empty key: got %v, want ErrInvalid", err)
	}
	if _, err := s.Update(t.Context(), store.Delete(k)); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("Update of a delete: got %v, want ErrInvalid", err)
	}
	if api.calls != 0 {
		t.Errorf("invalid requests made %d calls", api.calls)
	}
}

// countingAPI counts the calls that pass through to DynamoDB.
type countingAPI struct {
	dynamo.API
	calls atomic.Int64
}

func (c *countingAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.calls.Add(1)
	return c.API.GetItem(ctx, in, opts...)
}

func (c *countingAPI) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.calls.Add(1)
	return c.API.Query(ctx, in, opts...)
}

func (c *countingAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, opts ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.calls.Add(1)
	return c.API.TransactWriteItems(ctx, in, opts...)
}

func (c *countingAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.calls.Add(1)
	return c.API.UpdateItem(ctx, in, opts...)
}

func TestOneCallPerMethod(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	api := &countingAPI{API: client}
	s := dynamo.New(api, table)
	ctx := t.Context()
	k := key("p", "s")
	for _, step := range []struct {
		name string
		do   func() error
	}{
		{"Transact", func() error {
			return s.Transact(ctx, store.Put(store.Item{Key: k}, store.NotExists()), store.Increment(key("p", "t"), map[string]int64{"n": 1}))
		}},
		{"Get", func() error { _, err := s.Get(ctx, k); return err }},
		{"Query", func() error { _, err := s.Query(ctx, store.Query{PK: "p", Limit: 1}); return err }},
		{"Update", func() error { _, err := s.Update(ctx, store.Increment(k, map[string]int64{"n": 1})); return err }},
	} {
		before := api.calls.Load()
		if err := step.do(); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if n := api.calls.Load() - before; n != 1 {
			t.Errorf("%s made %d calls, want 1", step.name, n)
		}
	}
}

func TestCreateTable(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	if err := dynamo.CreateTable(t.Context(), client, table); err != nil {
		t.Fatalf("CreateTable on an existing table: %v", err)
	}
	out, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	desc := out.Table
	if s := desc.StreamSpecification; s == nil || !aws.ToBool(s.StreamEnabled) || s.StreamViewType != types.StreamViewTypeNewImage {
		t.Errorf("stream = %+v, want NEW_IMAGE", s)
	}
	if desc.BillingModeSummary == nil || desc.BillingModeSummary.BillingMode != types.BillingModePayPerRequest {
		t.Errorf("billing = %+v, want PAY_PER_REQUEST", desc.BillingModeSummary)
	}
	var gsis []string
	for _, g := range desc.GlobalSecondaryIndexes {
		name := aws.ToString(g.IndexName)
		gsis = append(gsis, name)
		want := []string{name + "pk", name + "sk"}
		if len(g.KeySchema) != 2 || aws.ToString(g.KeySchema[0].AttributeName) != want[0] || aws.ToString(g.KeySchema[1].AttributeName) != want[1] {
			t.Errorf("index %s keys = %+v, want %q", name, g.KeySchema, want)
		}
		// gsi1 and gsi2 hold data and store.IndexAttrs, gsi3 everything.
		wantType, wantAttrs := types.ProjectionTypeInclude, append([]string{"data"}, store.IndexAttrs...)
		if name == "gsi3" {
			wantType, wantAttrs = types.ProjectionTypeAll, nil
		}
		if g.Projection == nil || g.Projection.ProjectionType != wantType || !slices.Equal(g.Projection.NonKeyAttributes, wantAttrs) {
			t.Errorf("index %s projection = %+v, want %s %v", name, g.Projection, wantType, wantAttrs)
		}
	}
	slices.Sort(gsis)
	if !slices.Equal(gsis, []string{"gsi1", "gsi2", "gsi3"}) {
		t.Errorf("indexes = %q, want gsi1..gsi3", gsis)
	}
	ttl, err := client.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttl.TimeToLiveDescription; d == nil || d.TimeToLiveStatus != types.TimeToLiveStatusEnabled || aws.ToString(d.AttributeName) != "ttl" {
		t.Errorf("TTL = %+v, want enabled on ttl", d)
	}
}
