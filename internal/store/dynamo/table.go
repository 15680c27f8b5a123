package dynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/store"
)

// CreateTableAPI is the part of *dynamodb.Client that CreateTable uses.
type CreateTableAPI interface {
	CreateTable(ctx context.Context, params *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, params *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, params *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, params *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

var _ CreateTableAPI = (*dynamodb.Client)(nil)

// TableOption changes what CreateTable makes.
type TableOption func(*tableOptions)

type tableOptions struct{ noTTL bool }

// WithoutTTL leaves TTL off: for tests whose clocks are not the real one,
// which DynamoDB's expiry goes by.
func WithoutTTL() TableOption { return func(o *tableOptions) { o.noTTL = true } }

// CreateTable creates table with the layout the store expects, waits until
// it is active and enables TTL on it. A table that already exists is left
// as it is, except that TTL is enabled if it is not.
func CreateTable(ctx context.Context, api CreateTableAPI, table string, opts ...TableOption) error {
	var o tableOptions
	for _, opt := range opts {
		opt(&o)
	}
	_, err := api.CreateTable(ctx, TableDefinition(table))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamo: create table %s: %w", table, err)
	}

	waiter := dynamodb.NewTableExistsWaiter(api, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = time.Second, 10*time.Second
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 5*time.Minute); err != nil {
		return fmt.Errorf("dynamo: wait for table %s: %w", table, err)
	}
	if o.noTTL {
		return nil
	}
	return enableTTL(ctx, api, table)
}

// TTLAttribute is the attribute holding an item's expiry time (Unix
// seconds); CreateTable makes it the table's TTL attribute.
const TTLAttribute = attrTTL

// TableDefinition is the table CreateTable creates: keys, secondary indexes,
// billing and stream (TTL is enabled separately, on TTLAttribute).
// Deployment templates are checked against it.
func TableDefinition(table string) *dynamodb.CreateTableInput {
	attrs := []types.AttributeDefinition{
		{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
		{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
	}
	var gsis []types.GlobalSecondaryIndex
	for _, ix := range store.Indexes {
		pk, sk := keyAttrs(ix)
		attrs = append(attrs,
			types.AttributeDefinition{AttributeName: aws.String(pk), AttributeType: types.ScalarAttributeTypeS},
			types.AttributeDefinition{AttributeName: aws.String(sk), AttributeType: types.ScalarAttributeTypeS})
		gsis = append(gsis, types.GlobalSecondaryIndex{
			IndexName: aws.String(string(ix)),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(pk), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(sk), KeyType: types.KeyTypeRange},
			},
			Projection: projection(ix),
		})
	}
	return &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		BillingMode:          types.BillingModePayPerRequest,
		AttributeDefinitions: attrs,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		GlobalSecondaryIndexes: gsis,
		// The stream feeds event delivery and reporting.
		StreamSpecification: &types.StreamSpecification{
			StreamEnabled:  aws.Bool(true),
			StreamViewType: types.StreamViewTypeNewImage,
		},
	}
}

// projection is what ix holds besides the keys (store.IndexAttrs): gsi1
// and gsi2 the data and the attributes their readers take, gsi3 all.
func projection(ix store.Index) *types.Projection {
	if ix == store.GSI3 {
		return &types.Projection{ProjectionType: types.ProjectionTypeAll}
	}
	return &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: append([]string{attrData}, store.IndexAttrs...)}
}

// enableTTL turns on TTL on the ttl attribute unless it is on already:
// DynamoDB refuses to enable it twice.
func enableTTL(ctx context.Context, api CreateTableAPI, table string) error {
	desc, err := api.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamo: describe TTL of %s: %w", table, err)
	}
	if d := desc.TimeToLiveDescription; d != nil && aws.ToString(d.AttributeName) == attrTTL &&
		(d.TimeToLiveStatus == types.TimeToLiveStatusEnabled || d.TimeToLiveStatus == types.TimeToLiveStatusEnabling) {
		return nil
	}
	_, err = api.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrTTL),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil {
		return fmt.Errorf("dynamo: enable TTL on %s: %w", table, err)
	}
	return nil
}
