package cli

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/logging"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// openStore opens the DynamoDB table named by TALLY_TABLE, or else the
// embedded store in dataDir. The embedded store returns an error matching
// bolt.ErrLocked while another process has it open.
func openStore(ctx context.Context, dataDir string) (store.Store, error) {
	if table := os.Getenv(app.EnvTable); table != "" {
		client, err := dynamoClient(ctx)
		if err != nil {
			return nil, err
		}
		return dynamo.New(client, table), nil
	}
	return bolt.Open(app.StorePath(dataDir))
}

// dynamoClient returns a client configured the standard AWS way: region,
// credentials and so on from the environment, shared config files, SSO or
// the instance role, as people run the CLI. AWS_ENDPOINT_URL_DYNAMODB (or
// AWS_ENDPOINT_URL) points it at another endpoint, such as DynamoDB Local.
// The SDK's own messages join the server's JSON log at their level.
func dynamoClient(ctx context.Context) (*dynamodb.Client, error) {
	log := app.Logger()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithLogger(logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
		level := slog.LevelWarn
		if c == logging.Debug {
			level = slog.LevelDebug
		}
		log.Log(ctx, level, fmt.Sprintf(format, v...), "source", "aws-sdk", "classification", string(c))
	})))
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	return dynamodb.NewFromConfig(cfg), nil
}
