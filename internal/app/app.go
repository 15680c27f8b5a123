// Package app reads configuration (environment variables and flags) for
// the local server, the CLI and every Lambda function. It opens no store
// itself: the CLI opens the embedded store or the table (internal/cli), a
// function its table (internal/lambdafn), so a function does not link the
// embedded store.
package app

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally/internal/cidr"
	"github.com/tally-hq/tally/internal/endpoints"
)

// Environment variables.
const (
	EnvTable                = "TALLY_TABLE"                     // DynamoDB table; unset means the embedded store
	EnvData                 = "TALLY_DATA"                      // the embedded store's folder
	EnvRateLimit            = "TALLY_RATE_LIMIT"                // requests per minute per API key
	EnvApplicationRateLimit = "TALLY_APPLICATION_RATE_LIMIT"    // applications per minute per client IP
	EnvClickRateLimit       = "TALLY_CLICK_RATE_LIMIT"          // clicks recorded per minute per offer and client IP
	EnvLogLevel             = "TALLY_LOG_LEVEL"                 // debug, info, warn, error
	EnvWebhookWorkers       = "TALLY_WEBHOOK_WORKERS"           // webhook attempts a brand may have under way on the local server
	EnvWebhookRetryScale    = "TALLY_WEBHOOK_RETRY_SCALE"       // multiplies the retry schedule (tests: 0.001)
	EnvMaxConnections       = "TALLY_MAX_CONNECTIONS"           // the local server's open connections
	EnvDisableAfterFailures = "TALLY_ENDPOINT_DISABLE_FAILURES" // consecutive deliveries that failed every attempt, which disable an endpoint
	EnvDisableAfterFailing  = "TALLY_ENDPOINT_DISABLE_AFTER"    // failing this long with no success disables an endpoint
	EnvTrustedProxies       = "TALLY_TRUSTED_PROXIES"           // CIDRs whose X-Forwarded-For names the client, comma-separated
	EnvDeliveryRetention    = "TALLY_DELIVERY_RETENTION_DAYS"   // days a delivery stays in the log after its last change
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

// Prefixes reads a comma-separated list of CIDRs (a bare address is one
// address).
func Prefixes(name string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(os.Getenv(name), ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := cidr.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is not a CIDR such as 10.0.0.0/8: %w", name, s, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// MaxConnections reads how many connections the local server keeps open
// at most; 0 means the caller's default.
func MaxConnections() (int, error) { return PositiveInt(EnvMaxConnections) }

// PositiveInt reads the variable name as a positive integer; 0 when unset.
func PositiveInt(name string) (int, error) {
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

// Settings are the webhook settings in effect, defaults filled in.
type Settings struct {
	DisableAfterFailures int           // TALLY_ENDPOINT_DISABLE_FAILURES
	DisableAfterFailing  time.Duration // TALLY_ENDPOINT_DISABLE_AFTER
	DeliveryRetention    time.Duration // TALLY_DELIVERY_RETENTION_DAYS
}

// ReadSettings reads from the environment when a failing webhook
// subscription or partner postback is disabled (defaults: 100 consecutive
// failed deliveries, 120h) and how long deliveries stay (default
// endpoints.DefaultDeliveryRetention).
func ReadSettings() (Settings, error) {
	set := Settings{endpoints.DefaultDisableAfterFailures, endpoints.DefaultDisableAfterFailing, endpoints.DefaultDeliveryRetention}
	failures, err := PositiveInt(EnvDisableAfterFailures)
	if err != nil {
		return set, err
	}
	set.DisableAfterFailures = cmp.Or(failures, set.DisableAfterFailures)
	if s := os.Getenv(EnvDisableAfterFailing); s != "" {
		if set.DisableAfterFailing, err = time.ParseDuration(s); err != nil || set.DisableAfterFailing <= 0 {
			return set, fmt.Errorf("%s must be a positive duration such as 120h, not %q", EnvDisableAfterFailing, s)
		}
	}
	days, err := PositiveInt(EnvDeliveryRetention)
	if err != nil {
		return set, err
	}
	if days > 0 {
		set.DeliveryRetention = time.Duration(days) * 24 * time.Hour
	}
	return set, nil
}

// Health is the endpoints' health configuration the settings give.
func (s Settings) Health() endpoints.HealthConfig {
	return endpoints.HealthConfig{Failures: int64(s.DisableAfterFailures), Failing: s.DisableAfterFailing}
}

// LocalPipeline reads the local webhook pipeline's settings: how many
// attempts one brand may have under way at once (default 256, all brands
// together four times as many; they mostly wait on receivers and commits)
// and the retry schedule's scale (default 1).
func LocalPipeline() (workers int, retryScale float64, err error) {
	if workers, err = PositiveInt(EnvWebhookWorkers); err != nil || workers == 0 {
		workers = 256
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

// Logger writes JSON lines to stderr at LogLevel.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: LogLevel()}))
}

// LogLevel is the level TALLY_LOG_LEVEL names; info when unset or unknown.
func LogLevel() slog.Level {
	var level slog.Level
	if err := level.UnmarshalText([]byte(os.Getenv(EnvLogLevel))); err != nil {
		level = slog.LevelInfo
	}
	return level
}

// ApproverInterval is how often the local server runs the hold-time
// approval job (the AWS schedule runs it every minute).
const ApproverInterval = 30 * time.Second

// Approver approves pending conversions whose hold time has passed
// (conversions.Service).
type Approver interface {
	ApproveDue(ctx context.Context) (int, error)
}

// RunApprover runs the hold-time approval job every interval until ctx ends.
func RunApprover(ctx context.Context, approver Approver, interval time.Duration, log *slog.Logger) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			n, err := approver.ApproveDue(ctx)
			if err != nil && ctx.Err() == nil {
				log.Error("hold-time approval failed", "err", err.Error(), "approved", n)
			} else if n > 0 {
				log.Info("hold-time approval", "approved", n)
			}
		}
	}
}
