// Package emf publishes the Lambda functions' metrics as CloudWatch
// Embedded Metric Format log lines: one JSON line per event, which
// CloudWatch Logs turns into metrics of the namespace Tally, without an
// API call or an agent. The metrics are the local server's counters (package
// metrics), under the same names and labels (dimensions), and the
// reconciler's own; docs/aws.md lists them.
package emf

import (
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every metric.
const Namespace = "Tally"

// Metrics writes a line for each event it is told of. It is the observer
// of the HTTP API (httpapi.RequestObserver) and of the capabilities
// (clicks.Observer, conversions.Observer, webhooks.Observer).
type Metrics struct {
	mu  sync.Mutex // one line per Write, whole
	w   io.Writer
	now func() time.Time
}

// New returns metrics written to w (a function's stdout, which Lambda
// sends to CloudWatch Logs).
func New(w io.Writer) *Metrics { return &Metrics{w: w, now: time.Now} }

// Units of CloudWatch.
const (
	count   = "Count"
	seconds = "Seconds"
)

type metric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

// directive is one of a line's metric directives: its metrics, with the
// line's fields that are their dimensions.
type directive struct {
	Namespace  string     `json:"Namespace"`
	Dimensions [][]string `json:"Dimensions"`
	Metrics    []metric   `json:"Metrics"`
}

type metadata struct {
	Timestamp         int64       `json:"Timestamp"`
	CloudWatchMetrics []directive `json:"CloudWatchMetrics"`
}

// on makes a directive of one metric over the dimensions named (none: the
// metric's one series).
func on(dimensions []string, name, unit string) directive {
	if dimensions == nil {
		dimensions = []string{}
	}
	return directive{Namespace: Namespace, Dimensions: [][]string{dimensions}, Metrics: []metric{{name, unit}}}
}

// write writes one line: fields (the dimensions' values and the metrics'),
// described by directives.
func (m *Metrics) write(fields map[string]any, directives ...directive) {
	fields["_aws"] = metadata{Timestamp: m.now().UnixMilli(), CloudWatchMetrics: directives}
	line, err := json.Marshal(fields)
	if err != nil {
		return // strings and numbers only: it does not fail
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(append(line, '\n')) // a metric is not worth failing a request for
}

// RequestServed writes tally_http_requests_total by route, method and code,
// and tally_http_request_duration_seconds by route.
func (m *Metrics) RequestServed(route, method string, status int, took time.Duration) {
	m.write(map[string]any{
		"route": route, "method": method, "code": strconv.Itoa(status),
		"tally_http_requests_total": 1, "tally_http_request_duration_seconds": took.Seconds(),
	},
		on([]string{"route", "method", "code"}, "tally_http_requests_total", count),
		on([]string{"route"}, "tally_http_request_duration_seconds", seconds))
}

// ClickRecorded writes tally_clicks_total.
func (m *Metrics) ClickRecorded() {
	m.write(map[string]any{"tally_clicks_total": 1}, on(nil, "tally_clicks_total", count))
}

// ConversionEntered writes tally_conversions_total by status.
func (m *Metrics) ConversionEntered(status string) {
	m.write(map[string]any{"status": status, "tally_conversions_total": 1},
		on([]string{"status"}, "tally_conversions_total", count))
}

// AttemptRecorded writes tally_deliveries_total by type and outcome, and
// tally_delivery_attempt_duration_seconds by type when a request was sent.
func (m *Metrics) AttemptRecorded(deliveryType, outcome string, latency time.Duration, sent bool) {
	fields := map[string]any{"type": deliveryType, "outcome": outcome, "tally_deliveries_total": 1}
	directives := []directive{on([]string{"type", "outcome"}, "tally_deliveries_total", count)}
	if sent {
		fields["tally_delivery_attempt_duration_seconds"] = latency.Seconds()
		directives = append(directives, on([]string{"type"}, "tally_delivery_attempt_duration_seconds", seconds))
	}
	m.write(fields, directives...)
}

// Reconciled writes a reconciler run's ReconcilerDeferrals (1 when the run
// left its re-drives for a later one, else 0) and ReconcilerSkipped (the
// items it skipped), by FunctionName (the function's), every run, so that
// the alarm on deferrals sees each.
func (m *Metrics) Reconciled(function string, deferred bool, skipped int) {
	d := 0
	if deferred {
		d = 1
	}
	m.write(map[string]any{"FunctionName": function, "ReconcilerDeferrals": d, "ReconcilerSkipped": skipped},
		on([]string{"FunctionName"}, "ReconcilerDeferrals", count), on([]string{"FunctionName"}, "ReconcilerSkipped", count))
}
