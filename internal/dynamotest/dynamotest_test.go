package dynamotest_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/tally-hq/tally/internal/dynamotest"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

func TestEndpointIsStable(t *testing.T) {
	a, b := dynamotest.Endpoint(t), dynamotest.Endpoint(t)
	if a != b || !strings.HasPrefix(a, "http://") {
		t.Errorf("Endpoint = %q then %q, want one http URL", a, b)
	}
}

func TestNewTableIsDeletedAfterTheTest(t *testing.T) {
	var (
		client *dynamodb.Client
		tables []string
	)
	for range 2 {
		t.Run("sub/test name with spaces", func(t *testing.T) {
			var table string
			client, table = dynamotest.NewTable(t)
			out, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			if err != nil {
				t.Fatal(err)
			}
			if out.Table.TableStatus != types.TableStatusActive {
				t.Errorf("table status %s, want ACTIVE", out.Table.TableStatus)
			}
			tables = append(tables, table)
		})
	}
	if len(tables) != 2 || tables[0] == tables[1] {
		t.Fatalf("tables %q, want two distinct", tables)
	}
	for _, table := range tables {
		_, err := client.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		var notFound *types.ResourceNotFoundException
		if !errors.As(err, &notFound) {
			t.Errorf("DescribeTable(%s) after its test: %v, want ResourceNotFoundException", table, err)
		}
	}
}
