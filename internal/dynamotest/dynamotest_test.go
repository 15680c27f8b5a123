package dynamotest_test

import (
	"errors"
	"net"
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

func TestPrivateEndpointIsStoppedAfterTheTest(t *testing.T) {
	var addr string
	t.Run("private", func(t *testing.T) {
		endpoint := dynamotest.PrivateEndpoint(t)
		if endpoint == dynamotest.Endpoint(t) {
			t.Fatalf("PrivateEndpoint = %q, the shared endpoint", endpoint)
		}
		addr = strings.TrimPrefix(endpoint, "http://")
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	if addr == "" {
		return // skipped or failed above
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("%s still answers after its test", addr)
	}
}
