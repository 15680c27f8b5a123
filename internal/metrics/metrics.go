// Package metrics keeps the local server's Prometheus metrics: it is the
// observer the capabilities and the HTTP API tell of what they do
// (service.Observer, httpapi.RequestObserver), and serves what it counted
// in Prometheus's text exposition. The capabilities know nothing of
// Prometheus; the Lambda functions publish the same counters as CloudWatch
// metrics instead (package emf).
package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/webhooks"
)

// Metrics counts what the server does, for a Prometheus scrape.
type Metrics struct {
	reg         *prometheus.Registry
	requests    *prometheus.CounterVec
	durations   *prometheus.HistogramVec
	clicks      prometheus.Counter
	conversions *prometheus.CounterVec
	deliveries  *prometheus.CounterVec
	attempts    *prometheus.HistogramVec

	// The series of every status, type and outcome there is, resolved once
	// (read only after New).
	byStatus  map[string]prometheus.Counter
	byOutcome map[[2]string]prometheus.Counter
	byType    map[string]prometheus.Observer

	// routes holds each (route, method, status)'s series once resolved, so
	// that a request looks them up in one map read, without allocating.
	mu     sync.RWMutex
	routes map[routeKey]routeSeries
}

type routeKey struct {
	route, method string
	status        int
}

type routeSeries struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

// New returns the metrics, with the Go runtime's and the process's.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_http_requests_total", Help: "HTTP requests answered, by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tally_http_request_duration_seconds", Help: "Time to answer an HTTP request, by route pattern.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"route"}),
		clicks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tally_clicks_total", Help: "Clicks recorded.",
		}),
		conversions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_conversions_total", Help: "Conversions entering a status: recorded pending or approved, then approved or rejected.",
		}, []string{"status"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tally_deliveries_total", Help: "Delivery attempts recorded, by delivery type and what became of the delivery: succeeded, retrying or failed.",
		}, []string{"type", "outcome"}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "tally_delivery_attempt_duration_seconds", Help: "Time a delivery attempt took, until the receiver's whole answer or the 10 s limit, by delivery type.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"type"}),
		routes:    map[routeKey]routeSeries{},
		byStatus:  map[string]prometheus.Counter{},
		byOutcome: map[[2]string]prometheus.Counter{},
		byType:    map[string]prometheus.Observer{},
	}
	m.reg.MustRegister(m.requests, m.durations, m.clicks, m.conversions, m.deliveries, m.attempts,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// A scrape shows these series from the start, at zero.
	for _, status := range []string{tally.ConversionPending, tally.ConversionApproved, tally.ConversionRejected} {
		m.byStatus[status] = m.conversions.WithLabelValues(status)
	}
	for _, typ := range []string{tally.DeliveryWebhook, tally.DeliveryPostback} {
		for _, outcome := range []string{webhooks.OutcomeSucceeded, webhooks.OutcomeRetrying, webhooks.OutcomeFailed} {
			m.byOutcome[[2]string{typ, outcome}] = m.deliveries.WithLabelValues(typ, outcome)
		}
		m.byType[typ] = m.attempts.WithLabelValues(typ)
	}
	return m
}

// WatchBacklog reports the deliveries due and how late the oldest is
// (tally_deliveries_due, tally_delivery_lag_seconds), read with backlog at
// each scrape; log tells of a read that failed.
func (m *Metrics) WatchBacklog(backlog func(context.Context) (webhooks.Backlog, error), log *slog.Logger) {
	m.reg.MustRegister(&backlogCollector{read: backlog, log: log})
}

// Handler serves the metrics (GET /metrics).
func (m *Metrics) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}

// RequestServed counts a request (httpapi.RequestObserver).
func (m *Metrics) RequestServed(route, method string, status int, took time.Duration) {
	k := routeKey{route, method, status}
	m.mu.RLock()
	s, ok := m.routes[k]
	m.mu.RUnlock()
	if !ok {
		s = routeSeries{m.requests.WithLabelValues(route, method, strconv.Itoa(status)), m.durations.WithLabelValues(route)}
		m.mu.Lock()
		m.routes[k] = s
		m.mu.Unlock()
	}
	s.count.Inc()
	s.duration.Observe(took.Seconds())
}

// ClickRecorded counts a click (clicks.Observer).
func (m *Metrics) ClickRecorded() { m.clicks.Inc() }

// ConversionEntered counts a conversion entering status (conversions.Observer).
func (m *Metrics) ConversionEntered(status string) {
	c, ok := m.byStatus[status]
	if !ok {
		c = m.conversions.WithLabelValues(status)
	}
	c.Inc()
}

// AttemptRecorded counts an attempt step and times its request
// (webhooks.Observer).
func (m *Metrics) AttemptRecorded(deliveryType, outcome string, latency time.Duration, sent bool) {
	c, ok := m.byOutcome[[2]string{deliveryType, outcome}]
	if !ok {
		c = m.deliveries.WithLabelValues(deliveryType, outcome)
	}
	c.Inc()
	if !sent {
		return
	}
	h, ok := m.byType[deliveryType]
	if !ok {
		h = m.attempts.WithLabelValues(deliveryType)
	}
	h.Observe(latency.Seconds())
}

// backlogReadLimit bounds a scrape's read of the due index.
const backlogReadLimit = 5 * time.Second

// backlogCollector reads the backlog once per scrape for both gauges.
type backlogCollector struct {
	read func(context.Context) (webhooks.Backlog, error)
	log  *slog.Logger
}

var (
	dueDesc = prometheus.NewDesc("tally_deliveries_due",
		fmt.Sprintf("Deliveries whose next attempt is due now and not under way (counted up to %d).", webhooks.MaxBacklog), nil, nil)
	lagDesc = prometheus.NewDesc("tally_delivery_lag_seconds",
		"How long ago the oldest due attempt fell due: how far the deliveries run behind (0 when none is due).", nil, nil)
)

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- dueDesc
	ch <- lagDesc
}

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), backlogReadLimit)
	defer cancel()
	b, err := c.read(ctx)
	if err != nil {
		// Left out of this scrape rather than shown as a 0 that is not so.
		c.log.Warn("metrics: cannot read the deliveries due", "err", err.Error())
		return
	}
	ch <- prometheus.MustNewConstMetric(dueDesc, prometheus.GaugeValue, float64(b.Due))
	ch <- prometheus.MustNewConstMetric(lagDesc, prometheus.GaugeValue, b.Lag.Seconds())
}
