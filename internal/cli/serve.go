package cli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"syscall"
	"time"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/metrics"
	"github.com/tally-hq/tally/internal/portal"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/webhooks"
)

// shutdownGrace is how long in-flight requests get to finish on SIGTERM.
const shutdownGrace = 20 * time.Second

// The local server's limits. Requests are small and quick, and Tally itself
// gives a webhook receiver 10 seconds: a client gets 5 s to send its headers
// and 15 s for the whole request (a slower body answers 408), the answer
// gets 30 s to be written, and an idle keep-alive connection is closed after
// 60 s. net/http reads at most serverMaxHeaderBytes of headers (answering 431
// in plain text past it), four times what the API accepts (431 in the error
// shape past httpapi.MaxHeaderBytes).
const (
	readHeaderTimeout    = 5 * time.Second
	readTimeout          = 15 * time.Second
	writeTimeout         = 30 * time.Second
	idleTimeout          = 60 * time.Second
	serverMaxHeaderBytes = 4 * httpapi.MaxHeaderBytes
)

// defaultMaxConnections caps open connections at half the file descriptors
// the process may hold (the store, webhook deliveries and the admin
// commands need the rest), between 64 and 10,000.
func defaultMaxConnections() int {
	n, ok := openFileLimit()
	if !ok {
		return 1024
	}
	return min(max(n/2, 64), 10_000)
}

// serveGCPercent is the garbage collector's target (GOGC) for the server
// unless GOGC is set. Its live heap is small, tens of megabytes, and at
// Go's default of 100 collection took about 15 % of its CPU under load
// (docs/performance.md); 400 trades a few hundred megabytes at most for it.
const serveGCPercent = 400

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	dataFlag := fs.String("data", "", "embedded store folder (default $TALLY_DATA or ./.tally)")
	pprofAddr := fs.String("pprof", "", "serve Go's profiler (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off by default")
	metricsAddr := fs.String("metrics", "", "serve Prometheus metrics (GET /metrics) on this address, e.g. 127.0.0.1:9464; off by default")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(serveGCPercent)
	}
	log := app.Logger()
	cfg, err := httpapi.ConfigFromEnv(log)
	if err != nil {
		return err
	}
	dataDir := app.DataDir(*dataFlag)
	wroteInfo := false
	defer func() { // after the store has closed, so a CLI that finds it locked also finds the server
		if wroteInfo {
			os.Remove(serverInfoPath(dataDir))
		}
	}()
	st, err := openStore(ctx, dataDir)
	if errors.Is(err, bolt.ErrLocked) {
		return fmt.Errorf("%w\nanother tally process (tally serve?) has this folder open: stop it, or give this one another folder with --data (make run DATA=…)", err)
	}
	if err != nil {
		return err
	}
	defer st.Close()
	workers, retryScale, err := app.LocalPipeline()
	if err != nil {
		return err
	}
	maxConns, err := app.MaxConnections()
	if err != nil {
		return err
	}
	maxConns = cmp.Or(maxConns, defaultMaxConnections())
	settings, err := app.ReadSettings()
	if err != nil {
		return err
	}
	opts := []service.Option{service.WithEndpointHealth(settings.DisableAfterFailures, settings.DisableAfterFailing),
		service.WithDeliveryRetention(settings.DeliveryRetention), service.WithLoopbackReceivers(), service.WithRetryScale(retryScale)}
	var pipelineOpts []webhooks.PipelineOption
	if app.UsesDynamoDB() {
		// Other processes may serve from the same table: each attempt is
		// claimed in the table before it is sent.
		pipelineOpts = append(pipelineOpts, webhooks.SharedStore())
		opts = append(opts, service.ForDynamoDB())
	} else {
		// The embedded store is locked to this process: its counts are
		// exact, and what it remembers of brands without endpoints holds.
		opts = append(opts, service.WithProcessRateLimits(), service.WithOutboxOnlyForEndpoints())
	}
	opts = append(opts, service.WithPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), workers, log, pipelineOpts...))
	var m *metrics.Metrics
	if *metricsAddr != "" {
		m = metrics.New()
		opts = append(opts, service.WithObserver(m))
		cfg.Requests = m
	}
	svc := service.New(st, opts...)
	pipeline := svc.Pipeline

	ln, err := net.Listen("tcp", *addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w\nsomething listens on %s already (another tally serve?): stop it, or listen elsewhere with --addr (make run ADDR=127.0.0.1:9090)", err, *addr)
	}
	if err != nil {
		return err
	}
	cfg.AdminToken = newToken()
	if !app.UsesDynamoDB() {
		info := serverInfo{Addr: ln.Addr().String(), Token: cfg.AdminToken}
		if err := writePrivate(serverInfoPath(dataDir), info); err != nil {
			ln.Close()
			return err
		}
		wroteInfo = true
	}
	cfg.Dashboard = dashboard.New(svc.API(), cfg)
	cfg.Portal = portal.New(svc.API(), cfg)
	api := httpapi.New(svc.API(), cfg)
	conns := newConnLimit(ln, maxConns)
	srv := &http.Server{
		Handler:           conns.Track(api.Handler(httpapi.AllGroups...)),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
		ConnState:         conns.ConnState,
		ConnContext:       conns.ConnContext,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	jobs, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	var jobsDone sync.WaitGroup
	jobsDone.Go(func() { app.RunApprover(jobs, svc.Conversions, app.ApproverInterval, log) })
	jobsDone.Go(func() { pipeline.Run(jobs) })

	if m != nil {
		m.WatchBacklog(svc.Webhooks.Backlog, log)
		stopMetrics, err := serveMetrics(*metricsAddr, m, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	if *pprofAddr != "" {
		stopProfiler, err := serveProfiler(*pprofAddr, log)
		if err != nil {
			return err
		}
		defer stopProfiler()
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(conns) }()
	// The configuration in effect, defaults included.
	log.Info("listening", "addr", "http://"+ln.Addr().String(), "dashboard", "http://"+ln.Addr().String()+"/dashboard",
		"store", storeName(dataDir),
		"rateLimit", cfg.RateLimit, "applicationRateLimit", cfg.ApplicationRateLimit, "clickRateLimit", cfg.ClickRateLimit,
		"maxConnections", maxConns, "readHeaderTimeout", readHeaderTimeout.String(), "readTimeout", readTimeout.String(),
		"writeTimeout", writeTimeout.String(), "idleTimeout", idleTimeout.String(),
		"webhookWorkers", workers, "webhookRetryScale", retryScale, "logLevel", app.LogLevel().String(),
		"trustedProxies", cfg.TrustedProxies, "endpointDisableFailures", settings.DisableAfterFailures,
		"endpointDisableAfter", settings.DisableAfterFailing.String(), "deliveryRetentionDays", int(settings.DeliveryRetention/(24*time.Hour)))
	log.Warn("webhook receivers on loopback addresses are allowed: this is the local server; the cloud refuses them")

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down: finishing in-flight requests")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	stopJobs()
	jobsDone.Wait() // the store closes only after the last job let go of it
	if errors.Is(<-served, http.ErrServerClosed) && err == nil {
		log.Info("stopped cleanly")
	}
	return err
}

func storeName(dataDir string) string {
	if app.UsesDynamoDB() {
		return "dynamodb:" + os.Getenv(app.EnvTable)
	}
	return "embedded:" + app.StorePath(dataDir)
}

// writePrivate writes v as JSON to a file only the owner can read.
func writePrivate(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(v)
	_ = os.Remove(path) // WriteFile keeps an existing file's permissions
	return os.WriteFile(path, b, 0o600)
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
