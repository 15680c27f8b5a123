package dynamotest

import (
	"context"
	"maps"
	"math"
	"reflect"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Usage is what a Meter counted: calls by operation, and the capacity
// units DynamoDB on demand bills for them.
type Usage struct {
	Calls        map[string]int // by operation; "items written" counts the items of transactions
	WRU, RRU     float64        // write and read request units, index writes included
	BytesWritten int            // the new images' sizes, table only
}

// Meter is a dynamo.API that counts calls and computes the request units
// each costs under DynamoDB's billing rules: a write costs one unit per KB
// of the larger of the item's old and new image, twice in a transaction; each
// global secondary index the item is (or was) in costs a write of its entry
// (its keys and projected attributes, as dynamo.TableDefinition projects
// them) when a projected attribute changed, two when the index key moved; a strongly consistent read costs one unit per
// 4 KB read, an eventually consistent one (indexes) half. It reads the
// images it needs with the client it wraps, outside the count. A failed
// condition is billed as the write would have been.
type Meter struct {
	dynamo.API
	table string

	mu sync.Mutex
	u  Usage
}

// NewMeter wraps api, which holds table.
func NewMeter(api dynamo.API, table string) *Meter {
	return &Meter{API: api, table: table, u: Usage{Calls: map[string]int{}}}
}

// Take returns the usage so far and starts again from zero.
func (m *Meter) Take() Usage {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.u
	out.Calls = maps.Clone(m.u.Calls)
	m.u = Usage{Calls: map[string]int{}}
	return out
}

// Index is a secondary index of the table (CreateTable's): its key
// attributes and what it projects.
type Index struct {
	PK, SK string
	Type   types.ProjectionType
	Attrs  []string // the non-key attributes of an INCLUDE projection
}

// Indexes are the table's secondary indexes, as dynamo.TableDefinition
// makes them.
var Indexes = func() []Index {
	var out []Index
	for _, g := range dynamo.TableDefinition("t").GlobalSecondaryIndexes {
		out = append(out, Index{PK: *g.KeySchema[0].AttributeName, SK: *g.KeySchema[1].AttributeName,
			Type: g.Projection.ProjectionType, Attrs: g.Projection.NonKeyAttributes})
	}
	return out
}()

// Has reports whether the item is in the index.
func (ix Index) Has(it map[string]types.AttributeValue) bool {
	return it != nil && it[ix.PK] != nil && it[ix.SK] != nil
}

// Entry is the item's entry in the index: the table's and the index's
// keys, and the attributes the index projects.
func (ix Index) Entry(it map[string]types.AttributeValue) map[string]types.AttributeValue {
	if ix.Type == types.ProjectionTypeAll {
		return it
	}
	out := map[string]types.AttributeValue{}
	for _, name := range append([]string{"pk", "sk", ix.PK, ix.SK}, ix.Attrs...) {
		if v, ok := it[name]; ok {
			out[name] = v
		}
	}
	return out
}

// IndexEntryOverhead is what DynamoDB adds to the size of each index entry.
const IndexEntryOverhead = 100

// ItemStorageOverhead is what DynamoDB adds to each item's size in the
// storage it bills (not in its writes).
const ItemStorageOverhead = 100

func (m *Meter) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := m.API.GetItem(ctx, in, o...)
	size := 0
	if err == nil {
		size = ItemSize(out.Item)
	}
	m.read("GetItem", size, aws.ToBool(in.ConsistentRead))
	return out, err
}

func (m *Meter) Query(ctx context.Context, in *dynamodb.QueryInput, o ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := m.API.Query(ctx, in, o...)
	size := 0
	if err == nil {
		for _, it := range out.Items {
			size += ItemSize(it)
		}
	}
	m.read("Query", size, aws.ToBool(in.ConsistentRead))
	return out, err
}

func (m *Meter) read(op string, size int, consistent bool) {
	units := math.Max(1, math.Ceil(float64(size)/4096))
	if !consistent {
		units /= 2
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.u.Calls[op]++
	m.u.RRU += units
}

func (m *Meter) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	key := map[string]types.AttributeValue{"pk": in.Item["pk"], "sk": in.Item["sk"]}
	return meterWrite(m, ctx, "PutItem", key, func() (*dynamodb.PutItemOutput, error) { return m.API.PutItem(ctx, in, o...) })
}

func (m *Meter) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return meterWrite(m, ctx, "UpdateItem", in.Key, func() (*dynamodb.UpdateItemOutput, error) { return m.API.UpdateItem(ctx, in, o...) })
}

func (m *Meter) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, o ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return meterWrite(m, ctx, "DeleteItem", in.Key, func() (*dynamodb.DeleteItemOutput, error) { return m.API.DeleteItem(ctx, in, o...) })
}

func (m *Meter) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	keys := make([]map[string]types.AttributeValue, len(in.TransactItems))
	for i, it := range in.TransactItems {
		switch {
		case it.Put != nil:
			keys[i] = map[string]types.AttributeValue{"pk": it.Put.Item["pk"], "sk": it.Put.Item["sk"]}
		case it.Update != nil:
			keys[i] = it.Update.Key
		case it.Delete != nil:
			keys[i] = it.Delete.Key
		default:
			keys[i] = it.ConditionCheck.Key
		}
	}
	olds := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		olds[i] = m.image(ctx, k)
	}
	out, err := m.API.TransactWriteItems(ctx, in, o...)
	m.mu.Lock()
	m.u.Calls["TransactWriteItems"]++
	m.u.Calls["items written"] += len(keys)
	m.mu.Unlock()
	for i, k := range keys {
		if in.TransactItems[i].ConditionCheck != nil {
			m.charge(olds[i], olds[i], 2, false)
			continue
		}
		m.charge(olds[i], m.image(ctx, k), 2, err == nil)
	}
	return out, err
}

// meterWrite makes a single-item write and charges it.
func meterWrite[T any](m *Meter, ctx context.Context, op string, key map[string]types.AttributeValue, call func() (T, error)) (T, error) {
	old := m.image(ctx, key)
	out, err := call()
	m.mu.Lock()
	m.u.Calls[op]++
	m.mu.Unlock()
	m.charge(old, m.image(ctx, key), 1, err == nil)
	return out, err
}

// image reads an item as it is, outside the count.
func (m *Meter) image(ctx context.Context, key map[string]types.AttributeValue) map[string]types.AttributeValue {
	out, err := m.API.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(m.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil
	}
	return out.Item
}

// charge bills a write from old to new (nil: absent); factor is 2 in a
// transaction. A write that did not apply (applied false) is billed for
// the table only.
func (m *Meter) charge(old, new map[string]types.AttributeValue, factor float64, applied bool) {
	kb := func(size int) float64 { return math.Max(1, math.Ceil(float64(size)/1024)) }
	wru := factor * kb(max(ItemSize(old), ItemSize(new)))
	if applied {
		for _, ix := range Indexes {
			switch {
			case ix.Has(old) && ix.Has(new) && reflect.DeepEqual(old[ix.PK], new[ix.PK]) && reflect.DeepEqual(old[ix.SK], new[ix.SK]):
				if !reflect.DeepEqual(ix.Entry(old), ix.Entry(new)) {
					wru += kb(ItemSize(ix.Entry(new)) + IndexEntryOverhead)
				}
			default:
				if ix.Has(old) {
					wru += kb(ItemSize(ix.Entry(old)) + IndexEntryOverhead)
				}
				if ix.Has(new) {
					wru += kb(ItemSize(ix.Entry(new)) + IndexEntryOverhead)
				}
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.u.WRU += wru
	if applied {
		m.u.BytesWritten += ItemSize(new)
	}
}

// ItemSize is an item's size as DynamoDB counts it: each attribute's name
// plus its value (strings and binaries their length, numbers about one
// byte per two digits plus one).
func ItemSize(it map[string]types.AttributeValue) int {
	n := 0
	for name, v := range it {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += (len(v.Value)+1)/2 + 1
		default:
			n++
		}
	}
	return n
}
