package httpapi_test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// countingAPI counts the DynamoDB calls the store makes.
type countingAPI struct {
	dynamo.API
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingAPI) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls[op]++
}

// take returns the counts so far and starts again from zero.
func (c *countingAPI) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := maps.Clone(c.calls)
	clear(c.calls)
	return out
}

func (c *countingAPI) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	c.count("GetItem")
	return c.API.GetItem(ctx, in, o...)
}

func (c *countingAPI) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	c.count("Query")
	return c.API.Query(ctx, in, o...)
}

func (c *countingAPI) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	c.count("TransactWriteItems")
	return c.API.TransactWriteItems(ctx, in, o...)
}

func (c *countingAPI) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	c.count("UpdateItem")
	return c.API.UpdateItem(ctx, in, o...)
}

// Recording a conversion costs one TransactWriteItems (conversion, marker,
// cap counters, rollup, events); the offer read is cached per instance, and
// so is the API key. The one other call is the rate-limit counter that every
// authenticated request pays.
func TestConversionCostsOneTransaction(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	api := &countingAPI{API: client, calls: map[string]int{}}
	e := newEnv(t, dynamo.New(api, table), httpapi.Config{})
	brandID, key := e.brand()
	offerID := e.offer(key, map[string]any{"caps": map[string]any{"daily": 100, "weekly": 500, "monthly": 1000, "global": 5000}})
	partnerID := e.activePartner(brandID, key)
	api.take()

	post := func(txn string) map[string]int {
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": txn}))
		return api.take()
	}
	// The first conversion of this instance reads the offer (the key was
	// cached when the offer was created).
	first := post("order-1")
	if want := map[string]int{"GetItem": 1, "TransactWriteItems": 1, "UpdateItem": 1}; !maps.Equal(first, want) {
		t.Errorf("first conversion made %v, want %v", first, want)
	}
	for i := range 5 {
		if got, want := post(fmt.Sprint("order-", i+2)), map[string]int{"TransactWriteItems": 1, "UpdateItem": 1}; !maps.Equal(got, want) {
			t.Errorf("conversion %d made %v, want %v (offer cached)", i+2, got, want)
		}
	}
	// A replay reads the marker and the conversion it names, and writes nothing.
	e.must(200, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1"}))
	if got, want := api.take(), map[string]int{"TransactWriteItems": 1, "GetItem": 2, "UpdateItem": 1}; !maps.Equal(got, want) {
		t.Errorf("replay made %v, want %v", got, want)
	}
}
