package cli

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/tally-hq/tally/internal/dynamotest"
)

// The CLI's client goes where AWS_ENDPOINT_URL_DYNAMODB says, with the
// region and credentials of the environment and no config files.
func TestDynamoClientFromEnv(t *testing.T) {
	endpoint := dynamotest.Endpoint(t)
	dir := t.TempDir()
	for k, v := range map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB":   endpoint,
		"AWS_ENDPOINT_URL":            "",
		"AWS_REGION":                  "eu-west-1",
		"AWS_ACCESS_KEY_ID":           "env",
		"AWS_SECRET_ACCESS_KEY":       "env",
		"AWS_CONFIG_FILE":             dir + "/config",
		"AWS_SHARED_CREDENTIALS_FILE": dir + "/credentials",
	} {
		t.Setenv(k, v)
	}
	client, err := dynamoClient(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("the client did not reach DynamoDB Local: %v", err)
	}
}
