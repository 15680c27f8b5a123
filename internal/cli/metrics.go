package cli

import (
	"log/slog"
	"net"
	"net/http"

	"github.com/tally-hq/tally/internal/metrics"
)

// serveMetrics serves the Prometheus metrics (GET /metrics) on their own
// listener, never on the API's address: what they tell (routes, volumes,
// the delivery backlog) is for the operator, who chooses where to expose it.
func serveMetrics(addr string, m *metrics.Metrics, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: m.Handler(), ReadHeaderTimeout: readHeaderTimeout, WriteTimeout: writeTimeout, IdleTimeout: idleTimeout}
	go srv.Serve(ln)
	log.Info("metrics", "addr", "http://"+ln.Addr().String()+"/metrics")
	return func() { srv.Close() }, nil
}
