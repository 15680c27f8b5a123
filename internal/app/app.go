// Package app turns configuration (environment variables and flags) into a
// running service: it picks the store, builds the tracking service and the
// HTTP API. The local server, the CLI and every Lambda function start here.
package app

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/tracking"
)

// Environment variables.
const (
	EnvTable                = "TALLY_TABLE"                  // DynamoDB table; unset means the embedded store
	EnvData                 = "TALLY_DATA"                   // the embedded store's folder
	EnvRateLimit            = "TALLY_RATE_LIMIT"             // requests per minute per API key
	EnvApplicationRateLimit = "TALLY_APPLICATION_RATE_LIMIT" // applications per minute per client IP
	EnvLogLevel             = "TALLY_LOG_LEVEL"              // debug, info, warn, error
	EnvWebhookWorkers       = "TALLY_WEBHOOK_WORKERS"        // concurrent webhook steps of the local pipeline
	EnvWebhookRetryScale    = "TALLY_WEBHOOK_RETRY_SCALE"    // multiplies the retry schedule (tests: 0.001)
)

// DefaultDataDir is where `make run` keeps its data.
const DefaultDataDir = ".tally"

// DataDir returns the embedded store's folder: flag, then TALLY_DATA, then
// the default.
func DataDir(flag string) string {
	switch {
	case flag != "":
		return flag
	case os.Getenv(EnvData) != "":
		return os.Getenv(EnvData)
	}
	return DefaultDataDir
}

// StorePath is the embedded store's file in dataDir.
func StorePath(dataDir string) string { return filepath.Join(dataDir, "tally.db") }

// UsesDynamoDB reports whether the environment configures a DynamoDB table.
func UsesDynamoDB() bool { return os.Getenv(EnvTable) != "" }

// OpenStore opens the DynamoDB table named by TALLY_TABLE (its endpoint from
// the SDK's standard AWS_ENDPOINT_URL variables), or else the embedded store
// in dataDir. The embedded store returns an error matching bolt.ErrLocked
// while another process has it open.
func OpenStore(ctx context.Context, dataDir string) (store.Store, error) {
	if table := os.Getenv(EnvTable); table != "" {
		client, err := dynamo.NewClientFromEnv(ctx)
		if err != nil {
			return nil, err
		}
		return dynamo.New(client, table), nil
	}
	return bolt.Open(StorePath(dataDir))
}

// APIConfig reads the HTTP API's settings from the environment.
func APIConfig(logger *slog.Logger) (httpapi.Config, error) {
	cfg := httpapi.Config{Logger: logger}
	var err error
	if cfg.RateLimit, err = positiveInt(EnvRateLimit); err != nil {
		return cfg, err
	}
	cfg.ApplicationRateLimit, err = positiveInt(EnvApplicationRateLimit)
	return cfg, err
}

func positiveInt(name string) (int, error) {
	s := os.Getenv(name)
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s must be a positive integer, not %q", name, s)
	}
	return n, nil
}

// LocalPipeline reads the local webhook pipeline's settings: how many
// steps run at once (default 64; they mostly wait on receivers and commits)
// and the retry schedule's scale (default 1).
func LocalPipeline() (workers int, retryScale float64, err error) {
	if workers, err = positiveInt(EnvWebhookWorkers); err != nil || workers == 0 {
		workers = 64
	}
	if err != nil {
		return 0, 0, err
	}
	retryScale = 1
	if s := os.Getenv(EnvWebhookRetryScale); s != "" {
		if retryScale, err = strconv.ParseFloat(s, 64); err != nil || retryScale <= 0 || retryScale > 1 {
			return 0, 0, fmt.Errorf("%s must be a number in (0, 1], not %q", EnvWebhookRetryScale, s)
		}
	}
	return workers, retryScale, nil
}

// Logger writes JSON lines to stderr at the level TALLY_LOG_LEVEL names.
func Logger() *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// ApproverInterval is how often the local server runs the hold-time
// approval job (the AWS schedule runs it every minute).
const ApproverInterval = 30 * time.Second

// RunApprover runs the hold-time approval job every interval until ctx ends.
func RunApprover(ctx context.Context, svc *tracking.Service, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := svc.ApproveDue(ctx)
			if err != nil && ctx.Err() == nil {
				log.Error("hold-time approval failed", "err", err.Error(), "approved", n)
			} else if n > 0 {
				log.Info("hold-time approval", "approved", n)
			}
		}
	}
}
