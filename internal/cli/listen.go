package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/webhook"
)

// EnvWebhookSecret is listen's default --secret.
const EnvWebhookSecret = "TALLY_WEBHOOK_SECRET"

// received is what listen prints for a delivery it accepted: one JSON line.
type received struct {
	ReceivedAt string          `json:"receivedAt"`
	Event      string          `json:"event"`
	WebhookID  string          `json:"webhookId"`
	Signature  string          `json:"signature"` // "verified", or "unchecked" without --secret
	Body       json.RawMessage `json:"body"`
}

// listen is a webhook receiver for development, like Stripe CLI's listen:
// it takes deliveries at any path on 127.0.0.1:port, checks each signature
// with the subscription's secret or public key (--scheme tally:
// webhook.VerifyRequest, standard-webhooks: webhook.VerifyStandardRequest;
// timestamp within 5 minutes), prints each delivery it accepts as a line of JSON on
// stdout and answers --status (204). A delivery that does not verify
// answers 400 and is reported on stderr only.
func listen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("listen", flag.ContinueOnError)
	host := fs.String("host", "127.0.0.1", "address to listen on")
	port := fs.Int("port", 9000, "port to listen on")
	secret := fs.String("secret", os.Getenv(EnvWebhookSecret), "the subscription's signing secret, or its whpk_ public key with ed25519 (default $"+EnvWebhookSecret+"); without it signatures are not checked")
	scheme := fs.String("scheme", tally.SchemeTally, "the subscription's signatureScheme: tally (X-Tally-Signature) or standard-webhooks (webhook-signature)")
	status := fs.Int("status", http.StatusNoContent, "status to answer deliveries with (a 5xx makes Tally retry)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	verify := webhook.VerifyRequest
	switch *scheme {
	case tally.SchemeTally:
	case tally.SchemeStandardWebhooks:
		verify = webhook.VerifyStandardRequest
	default:
		return misuse("--scheme %q is not a signature scheme: tally or standard-webhooks", *scheme)
	}
	if *status < 200 || *status > 599 {
		return misuse("--status %d is not an HTTP status", *status)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if errors.Is(err, syscall.EADDRINUSE) {
		return fmt.Errorf("%w\nport %d is taken (another tally listen?): stop it, or pick another with --port", err, *port)
	}
	if err != nil {
		return err
	}
	var mu sync.Mutex // one line at a time
	report := func(w io.Writer, format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format, args...)
	}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "deliveries are POSTs", http.StatusMethodNotAllowed)
				return
			}
			rec := received{ReceivedAt: time.Now().UTC().Format(time.RFC3339Nano), Event: r.Header.Get(webhook.EventHeader),
				WebhookID: r.Header.Get(webhook.WebhookIDHeader), Signature: "unchecked"}
			var body []byte
			var err error
			if *secret != "" {
				rec.Signature = "verified"
				body, err = verify(*secret, r, webhook.DefaultTolerance)
			} else {
				body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, webhook.MaxBodyBytes))
			}
			if err != nil {
				report(stderr, "refused %s %s: %v\n", rec.Event, rec.WebhookID, err)
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if rec.Body = body; !json.Valid(body) {
				rec.Body, _ = json.Marshal(string(body))
			}
			line, _ := json.Marshal(rec)
			report(stdout, "%s\n", line)
			w.WriteHeader(*status)
		}),
		// A receiver gets 10 seconds from Tally: so do its own limits.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
	}
	if *secret == "" {
		report(stderr, "no --secret: deliveries are printed without checking their signatures\n")
	}
	report(stderr, "listening for webhooks on http://%s/ (subscribe that URL, any path); Ctrl-C stops\n", ln.Addr())

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	<-served // http.ErrServerClosed
	return err
}
