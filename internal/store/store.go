// Package store defines the item store that all business logic is written
// against: a small subset of DynamoDB's data model (partition and sort keys,
// overloaded secondary indexes, conditional transactions, atomic counters,
// TTL) that both the DynamoDB backend and the embedded bbolt backend provide
// with identical semantics. The conformance suite in storetest pins those
// semantics down.
//
// Requests must follow the rules stated on the types below; both backends
// check them with the same code (ValidateKey, ValidateQuery, ValidateOps,
// ValidateUpdate) before reading or writing anything, and reject a request
// that breaks one with an error that wraps ErrInvalid and says which rule.
package store

import (
	"context"
	"errors"
	"fmt"
)

// MaxTransactOps is the most operations one Transact call accepts
// (DynamoDB's TransactWriteItems limit).
const MaxTransactOps = 100

// Index names a place to query: the table itself or one of the overloaded
// global secondary indexes. Every item may carry keys for each index; an item
// without a given index's partition key is absent from that index (sparse).
type Index string

const (
	Table Index = ""
	GSI1  Index = "gsi1"
	GSI2  Index = "gsi2"
	GSI3  Index = "gsi3"
)

// Indexes lists the secondary indexes every backend maintains.
var Indexes = []Index{GSI1, GSI2, GSI3}

// IndexAttrs are the attributes, besides the item's key, the index's own
// key and Data, that GSI1 and GSI2 hold: what their readers take from an index query (a click's
// conversionId, an API key's lastUsedMs). A query on GSI1 or GSI2 returns
// each item with its keys, its Data and these attributes only; GSI3's
// readers take the whole item, and it holds every attribute. So an
// attribute these indexes leave out (a delivery's response bodies) is
// written once per item, not once per index entry.
var IndexAttrs = []string{"conversionId", "lastUsedMs"}

// Projection is the item as a query on ix returns it.
func (it Item) Projection(ix Index) Item {
	if ix == Table || ix == GSI3 {
		return it
	}
	out := Item{Key: it.Key, Data: it.Data}
	if ix == GSI1 {
		out.GSI1 = it.GSI1
	} else {
		out.GSI2 = it.GSI2
	}
	for _, name := range IndexAttrs {
		if v, ok := it.Attrs[name]; ok {
			if out.Attrs == nil {
				out.Attrs = map[string]string{}
			}
			out.Attrs[name] = v
		}
		if v, ok := it.Nums[name]; ok {
			if out.Nums == nil {
				out.Nums = map[string]int64{}
			}
			out.Nums[name] = v
		}
		if v, ok := it.Bins[name]; ok {
			if out.Bins == nil {
				out.Bins = map[string][]byte{}
			}
			out.Bins[name] = v
		}
	}
	return out
}

// Key is an item's primary key. Both parts are non-empty valid UTF-8 without
// NUL bytes, the partition key at most 2048 bytes and the sort key at most
// 1024 (DynamoDB's limits). DynamoDB itself would take NUL, but the embedded
// backend separates keys with it, so no backend accepts it.
type Key struct {
	PK string
	SK string
}

// IndexKey places an item in a secondary index. The zero value means "not in
// the index"; setting only one half is an error. A set IndexKey follows the
// rules of Key.
type IndexKey struct {
	PK string
	SK string
}

// Item is one stored record.
//
// Attrs and Nums are top-level attributes that conditions can test and
// updates can change. Bins are top-level binary attributes (DynamoDB's B)
// that only a put writes: bytes that are not text, such as compressed
// ones, without base64's third more. The three share one namespace (a name
// is a string, a number or bytes, not two of them); as in DynamoDB, an
// update's Set of a binary attribute's name replaces it, an Add to one
// fails, and no condition matches one. Data is the record body, opaque to the store (the
// services keep JSON there). Attribute names must be non-empty and must not
// collide with the reserved names in Reserved; names and string values must
// be valid UTF-8, and binary values non-empty. Empty maps and Data may come
// back as nil.
// Neither backend checks DynamoDB's 400 KB item size: keep items small.
type Item struct {
	Key
	GSI1 IndexKey
	GSI2 IndexKey
	GSI3 IndexKey

	Attrs map[string]string
	Nums  map[string]int64
	Bins  map[string][]byte
	Data  []byte

	// ExpiresAt is a Unix time in seconds after which the backend may delete
	// the item (DynamoDB TTL). Deletion is lazy and may lag by days, so
	// correctness must never depend on it. Zero means never.
	ExpiresAt int64
}

// IndexKey returns the item's key in the given index.
func (it Item) IndexKey(ix Index) IndexKey {
	switch ix {
	case GSI1:
		return it.GSI1
	case GSI2:
		return it.GSI2
	case GSI3:
		return it.GSI3
	}
	return IndexKey(it.Key)
}

// Reserved are attribute names the backends use for the fixed fields of Item;
// Attrs, Nums and Bins must not use them.
var Reserved = []string{"pk", "sk", "gsi1pk", "gsi1sk", "gsi2pk", "gsi2sk", "gsi3pk", "gsi3sk", "data", "ttl"}

// Query reads one partition of the table or an index, in sort-key order.
//
// Index must be Table or one of Indexes, and PK is required. The sort key may
// be restricted either by SKPrefix or by the inclusive bounds SKFrom and SKTo
// (an empty bound is open). PK, SKPrefix, SKFrom and SKTo follow the rules of
// Key on content and size. Limit caps the items returned (1..1000; 0 means
// 100). Cursor continues a previous page of the very same query; a cursor from
// another partition or index is rejected with ErrInvalidCursor. SKFrom after
// SKTo, or a prefix together with bounds, is an error.
//
// Queries on a secondary index are eventually consistent on DynamoDB: an item
// written a moment ago may not be there yet. They return what the index
// holds of each item (Item.Projection).
type Query struct {
	Index    Index
	PK       string
	SKPrefix string
	SKFrom   string
	SKTo     string
	Desc     bool
	Limit    int
	Cursor   string
}

// Page is one page of a query. Cursor is empty when there are no more items.
type Page struct {
	Items  []Item
	Cursor string
}

// OpKind says what a transaction operation does.
type OpKind int

const (
	// OpPut writes Item whole, replacing any item with the same key.
	OpPut OpKind = iota + 1
	// OpUpdate changes an item in place, creating it when absent: Set
	// assigns string attributes, Add adds to numeric attributes (an absent
	// attribute counts as 0), a non-zero ExpiresAt sets the TTL. It must
	// change something, Set and Add must not name the same attribute, and
	// their names and values follow Item's rules for attributes.
	OpUpdate
	// OpDelete removes the item with Key; deleting an absent item is not an error.
	OpDelete
	// OpCheck writes nothing; only its conditions count, and it needs at
	// least one.
	OpCheck
)

// Op is one operation of a transaction. Conds must all hold for the whole
// transaction to apply. Kind must be one of the OpKind constants, and the
// Kind of each Cond one of the CondKind constants.
type Op struct {
	Kind      OpKind
	Item      Item // OpPut
	Key       Key  // OpUpdate, OpDelete, OpCheck
	Set       map[string]string
	Add       map[string]int64
	ExpiresAt int64
	Conds     []Cond
}

// Put returns an operation that writes item when conds hold.
func Put(item Item, conds ...Cond) Op { return Op{Kind: OpPut, Item: item, Conds: conds} }

// Delete returns an operation that removes the item at key when conds hold.
func Delete(key Key, conds ...Cond) Op { return Op{Kind: OpDelete, Key: key, Conds: conds} }

// Check returns an operation that only asserts conds on the item at key.
func Check(key Key, conds ...Cond) Op { return Op{Kind: OpCheck, Key: key, Conds: conds} }

// Increment returns an update that adds deltas to counters of the item at key.
func Increment(key Key, add map[string]int64, conds ...Cond) Op {
	return Op{Kind: OpUpdate, Key: key, Add: add, Conds: conds}
}

// Target is the key an operation acts on.
func (o Op) Target() Key {
	if o.Kind == OpPut {
		return o.Item.Key
	}
	return o.Key
}

// CondKind says what a condition tests.
type CondKind int

const (
	// CondExists holds when the item exists.
	CondExists CondKind = iota + 1
	// CondNotExists holds when the item does not exist.
	CondNotExists
	// CondAttrEquals holds when string attribute Attr equals S.
	CondAttrEquals
	// CondNumLess holds when numeric attribute Attr is less than N; an
	// absent attribute (or item) counts as 0.
	CondNumLess
	// CondNumEquals holds when numeric attribute Attr equals N; an absent
	// attribute (or item) counts as 0.
	CondNumEquals
)

// Cond is a condition on the current state of an operation's item. Attr,
// where the kind uses it, is an attribute name by the rules of Item, and S
// must be valid UTF-8.
type Cond struct {
	Kind CondKind
	Attr string
	S    string
	N    int64
}

// Exists holds when the item exists.
func Exists() Cond { return Cond{Kind: CondExists} }

// NotExists holds when the item does not exist.
func NotExists() Cond { return Cond{Kind: CondNotExists} }

// AttrEquals holds when the string attribute attr equals v.
func AttrEquals(attr, v string) Cond { return Cond{Kind: CondAttrEquals, Attr: attr, S: v} }

// NumLess holds when the numeric attribute attr (absent = 0) is less than n.
func NumLess(attr string, n int64) Cond { return Cond{Kind: CondNumLess, Attr: attr, N: n} }

// NumEquals holds when the numeric attribute attr (absent = 0) equals n.
func NumEquals(attr string, n int64) Cond { return Cond{Kind: CondNumEquals, Attr: attr, N: n} }

// Store is the item store. Implementations are safe for concurrent use.
type Store interface {
	// Get returns the item at key, or ErrNotFound.
	Get(ctx context.Context, key Key) (Item, error)
	// Query returns one page of a partition.
	Query(ctx context.Context, q Query) (Page, error)
	// Transact applies all operations atomically, or none of them. When a
	// condition fails it returns a *ConditionFailedError naming the first
	// failing operation; when a concurrent transaction got in the way it
	// returns ErrConflict and the caller may retry. It takes 1 to
	// MaxTransactOps operations, each on a distinct key.
	Transact(ctx context.Context, ops ...Op) error
	// Update applies a single OpUpdate (any other kind is ErrInvalid) and
	// returns the item as it is after the update (for counters whose new
	// value the caller needs). Like Transact, it may return ErrConflict.
	Update(ctx context.Context, op Op) (Item, error)
	// Close releases the store.
	Close() error
}

var (
	// ErrNotFound means no item has the key.
	ErrNotFound = errors.New("store: item not found")
	// ErrConflict means a concurrent transaction touched the same items;
	// retrying may succeed.
	ErrConflict = errors.New("store: transaction conflict")
	// ErrInvalidCursor means a cursor was malformed or belongs to another query.
	ErrInvalidCursor = errors.New("store: invalid cursor")
	// ErrInvalid means a request broke one of the rules stated in this
	// package, so nothing was read or written. The errors that wrap it say
	// which rule; retrying the same request cannot succeed.
	ErrInvalid = errors.New("store: invalid request")
)

// ConditionFailedError reports that the condition of operation Index (its
// position in the Transact call, 0 for Update) did not hold.
type ConditionFailedError struct {
	Index int
}

func (e *ConditionFailedError) Error() string {
	return fmt.Sprintf("store: condition of operation %d failed", e.Index)
}

// FailedOp returns the index of the operation whose condition failed, and
// whether err is such a failure.
func FailedOp(err error) (int, bool) {
	if err == nil {
		return 0, false // without errors.As, which allocates: every click asks
	}
	var cf *ConditionFailedError
	if errors.As(err, &cf) {
		return cf.Index, true
	}
	return 0, false
}
