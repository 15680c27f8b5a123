// Package dynamo implements store.Store on a DynamoDB single table.
//
// Every item is one DynamoDB item: the key in pk/sk, the secondary index keys
// in gsiNpk/gsiNsk (absent when the item is not in that index, which keeps
// the indexes sparse), the body in the binary attribute data, the expiry in
// ttl, and each of Attrs, Nums and Bins as a top-level string, number or
// binary attribute.
package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/store"
)

// API is the part of *dynamodb.Client the store uses; wrap it to observe or
// fake the calls.
type API interface {
	GetItem(ctx context.Context, params *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	Query(ctx context.Context, params *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, params *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	UpdateItem(ctx context.Context, params *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	PutItem(ctx context.Context, params *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	DeleteItem(ctx context.Context, params *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

var _ API = (*dynamodb.Client)(nil)

// Store is a store.Store backed by one DynamoDB table laid out by CreateTable.
type Store struct {
	api   API
	table string
}

var _ store.Store = (*Store)(nil)

// New returns a store on table, which must have the layout CreateTable makes.
func New(api API, table string) *Store {
	return &Store{api: api, table: table}
}

// Close does nothing: the client owns no resources that need releasing.
func (s *Store) Close() error { return nil }

// Get reads the item at key with a strongly consistent read.
func (s *Store) Get(ctx context.Context, key store.Key) (store.Item, error) {
	if err := store.ValidateKey(key); err != nil {
		return store.Item{}, err
	}
	out, err := s.api.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            marshalKey(key),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return store.Item{}, fmt.Errorf("dynamo: get %s/%s: %w", key.PK, key.SK, err)
	}
	if out.Item == nil {
		return store.Item{}, store.ErrNotFound
	}
	return unmarshalItem(out.Item)
}

// Query reads one page of a partition of the table or of a secondary index.
// Reads of the table are strongly consistent; DynamoDB offers only eventual
// consistency on global secondary indexes.
func (s *Store) Query(ctx context.Context, q store.Query) (store.Page, error) {
	limit, err := store.ValidateQuery(q)
	if err != nil {
		return store.Page{}, err
	}
	var start map[string]types.AttributeValue
	if q.Cursor != "" {
		if start, err = decodeCursor(q); err != nil {
			return store.Page{}, err
		}
	}
	pkAttr, skAttr := keyAttrs(q.Index)

	var e exprBuilder
	cond := e.name(pkAttr) + " = " + e.value(str(q.PK))
	switch {
	case q.SKPrefix != "":
		cond += " AND begins_with(" + e.name(skAttr) + ", " + e.value(str(q.SKPrefix)) + ")"
	case q.SKFrom != "" && q.SKTo != "":
		cond += " AND " + e.name(skAttr) + " BETWEEN " + e.value(str(q.SKFrom)) + " AND " + e.value(str(q.SKTo))
	case q.SKFrom != "":
		cond += " AND " + e.name(skAttr) + " >= " + e.value(str(q.SKFrom))
	case q.SKTo != "":
		cond += " AND " + e.name(skAttr) + " <= " + e.value(str(q.SKTo))
	}

	in := &dynamodb.QueryInput{
		TableName:                 aws.String(s.table),
		KeyConditionExpression:    aws.String(cond),
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.values,
		ScanIndexForward:          aws.Bool(!q.Desc),
		// One extra item tells whether another page exists, so a page that
		// ends exactly at the end of the partition gets no cursor.
		Limit:             aws.Int32(int32(limit + 1)),
		ExclusiveStartKey: start,
	}
	if q.Index == store.Table {
		in.ConsistentRead = aws.Bool(true)
	} else {
		in.IndexName = aws.String(string(q.Index))
	}

	out, err := s.api.Query(ctx, in)
	if err != nil {
		return store.Page{}, fmt.Errorf("dynamo: query %q %s: %w", q.Index, q.PK, err)
	}
	page := store.Page{Items: make([]store.Item, 0, min(len(out.Items), limit))}
	for _, av := range out.Items[:min(len(out.Items), limit)] {
		it, err := unmarshalItem(av)
		if err != nil {
			return store.Page{}, err
		}
		page.Items = append(page.Items, it)
	}
	switch {
	case len(out.Items) > limit:
		page.Cursor = encodeCursor(q.Index, page.Items[limit-1])
	case len(out.LastEvaluatedKey) > 0:
		// DynamoDB stopped early at its 1 MB page size.
		if page.Cursor, err = encodeKeyCursor(q.Index, out.LastEvaluatedKey); err != nil {
			return store.Page{}, err
		}
	}
	return page, nil
}

// Transact applies ops with one TransactWriteItems call, or a single put,
// update or delete with one conditional PutItem, UpdateItem or DeleteItem:
// as atomic, at half the write units (DynamoDB bills each item of a
// transaction twice).
func (s *Store) Transact(ctx context.Context, ops ...store.Op) error {
	if err := store.ValidateOps(ops); err != nil {
		return err
	}
	if len(ops) == 1 && ops[0].Kind != store.OpCheck {
		return s.write(ctx, ops[0])
	}
	items := make([]types.TransactWriteItem, len(ops))
	for i, op := range ops {
		items[i] = s.transactItem(op)
	}
	_, err := s.api.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil
	}
	var canceled *types.TransactionCanceledException
	if errors.As(err, &canceled) {
		for i, r := range canceled.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return &store.ConditionFailedError{Index: i}
			}
		}
		for _, r := range canceled.CancellationReasons {
			if aws.ToString(r.Code) == "TransactionConflict" {
				return fmt.Errorf("%w: %w", store.ErrConflict, err)
			}
		}
	}
	return fmt.Errorf("dynamo: transact %d ops: %w", len(ops), conflict(err))
}

func (s *Store) transactItem(op store.Op) types.TransactWriteItem {
	var e exprBuilder
	cond := e.conds(op.Conds)
	switch op.Kind {
	case store.OpPut:
		return types.TransactWriteItem{Put: &types.Put{
			TableName:                 aws.String(s.table),
			Item:                      marshalItem(op.Item),
			ConditionExpression:       cond,
			ExpressionAttributeNames:  e.names,
			ExpressionAttributeValues: e.values,
		}}
	case store.OpUpdate:
		update := e.update(op)
		return types.TransactWriteItem{Update: &types.Update{
			TableName:                 aws.String(s.table),
			Key:                       marshalKey(op.Key),
			UpdateExpression:          aws.String(update),
			ConditionExpression:       cond,
			ExpressionAttributeNames:  e.names,
			ExpressionAttributeValues: e.values,
		}}
	case store.OpDelete:
		return types.TransactWriteItem{Delete: &types.Delete{
			TableName:                 aws.String(s.table),
			Key:                       marshalKey(op.Key),
			ConditionExpression:       cond,
			ExpressionAttributeNames:  e.names,
			ExpressionAttributeValues: e.values,
		}}
	default: // store.OpCheck; store.ValidateOps admits nothing else.
		return types.TransactWriteItem{ConditionCheck: &types.ConditionCheck{
			TableName:                 aws.String(s.table),
			Key:                       marshalKey(op.Key),
			ConditionExpression:       cond,
			ExpressionAttributeNames:  e.names,
			ExpressionAttributeValues: e.values,
		}}
	}
}

// write applies one put, update or delete as a single conditional write.
func (s *Store) write(ctx context.Context, op store.Op) error {
	it := s.transactItem(op)
	var err error
	switch {
	case it.Put != nil:
		p := it.Put
		_, err = s.api.PutItem(ctx, &dynamodb.PutItemInput{TableName: p.TableName, Item: p.Item, ConditionExpression: p.ConditionExpression,
			ExpressionAttributeNames: p.ExpressionAttributeNames, ExpressionAttributeValues: p.ExpressionAttributeValues})
	case it.Update != nil:
		u := it.Update
		_, err = s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: u.TableName, Key: u.Key, UpdateExpression: u.UpdateExpression,
			ConditionExpression: u.ConditionExpression, ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues})
	default:
		d := it.Delete
		_, err = s.api.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: d.TableName, Key: d.Key, ConditionExpression: d.ConditionExpression,
			ExpressionAttributeNames: d.ExpressionAttributeNames, ExpressionAttributeValues: d.ExpressionAttributeValues})
	}
	return singleError(err, op.Target())
}

// singleError maps the error of a single-item write to the store's.
func singleError(err error, key store.Key) error {
	if err == nil {
		return nil
	}
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return &store.ConditionFailedError{Index: 0}
	}
	return fmt.Errorf("dynamo: write %s/%s: %w", key.PK, key.SK, conflict(err))
}

// Update applies one update with UpdateItem and returns the item after it.
func (s *Store) Update(ctx context.Context, op store.Op) (store.Item, error) {
	if err := store.ValidateUpdate(op); err != nil {
		return store.Item{}, err
	}
	var e exprBuilder
	cond := e.conds(op.Conds)
	update := e.update(op)
	out, err := s.api.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(s.table),
		Key:                       marshalKey(op.Key),
		UpdateExpression:          aws.String(update),
		ConditionExpression:       cond,
		ExpressionAttributeNames:  e.names,
		ExpressionAttributeValues: e.values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return store.Item{}, singleError(err, op.Key)
	}
	return unmarshalItem(out.Attributes)
}

// conflict marks err as store.ErrConflict when DynamoDB says a concurrent
// transaction held the item, so callers know a retry may succeed. DynamoDB
// Local says the same of writers queued on one item with an
// InternalServerError after its lock wait ("This request will succeed in
// actual DynamoDB API"): the write was not applied, so it is a conflict too.
//
// TransactionInProgressException and throttling are deliberately not
// mapped: the SDK already retries them with backoff, and once it gives up the
// outcome of an in-progress transaction is unknown, so a caller's blind retry
// could apply it twice.
func conflict(err error) error {
	var tc *types.TransactionConflictException
	var ise *types.InternalServerError
	if errors.As(err, &tc) || errors.As(err, &ise) && strings.Contains(ise.ErrorMessage(), "waiting for a lock") {
		return fmt.Errorf("%w: %w", store.ErrConflict, err)
	}
	return err
}
