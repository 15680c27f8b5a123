package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/tracking"
)

// shutdownGrace is how long in-flight requests get to finish on SIGTERM.
const shutdownGrace = 20 * time.Second

func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "address to listen on")
	dataFlag := fs.String("data", "", "embedded store folder (default $TALLY_DATA or ./.tally)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := app.Logger()
	cfg, err := app.APIConfig(log)
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
	st, err := app.OpenStore(ctx, dataDir)
	if err != nil {
		return err
	}
	defer st.Close()
	workers, retryScale, err := app.LocalPipeline()
	if err != nil {
		return err
	}
	svc := tracking.New(st, tracking.WithLoopbackReceivers(), tracking.WithRetryScale(retryScale))
	pipeline := svc.NewPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), workers, log)

	ln, err := net.Listen("tcp", *addr)
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
	api := httpapi.New(svc, cfg)
	srv := &http.Server{
		Handler:           api.Handler(httpapi.AllGroups...),
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	jobs, stopJobs := context.WithCancel(context.WithoutCancel(ctx))
	defer stopJobs()
	var jobsDone sync.WaitGroup
	jobsDone.Go(func() { app.RunApprover(jobs, svc, app.ApproverInterval, log) })
	jobsDone.Go(func() { pipeline.Run(jobs) })

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("listening", "addr", "http://"+ln.Addr().String(), "store", storeName(dataDir), "rateLimit", cfg.RateLimit)
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
