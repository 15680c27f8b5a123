// Package emf publishes the Lambda functions' metrics as CloudWatch
// Embedded Metric Format log lines, which CloudWatch Logs turns into
// metrics of the namespace Tally, without an API call or an agent: one JSON
// line per event, or, in an invocation wrapped by PerInvocation, as few
// lines as its events fit in, written at its end. The metrics are the local
// server's counters (package metrics), under the same names and labels
// (dimensions), and the reconciler's own; docs/aws.md lists them. An API
// request's line is also its log line: the fields that find the request
// beside its metrics (RequestLine).
package emf

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Namespace is the CloudWatch namespace of every metric.
const Namespace = "Tally"

// Metrics writes the events it is told of. It is the observer of the HTTP
// API (httpapi.RequestObserver) and of the capabilities (clicks.Observer,
// conversions.Observer, webhooks.Observer).
type Metrics struct {
	mu      sync.Mutex // one Write at a time, each of whole lines; guards open and pending
	w       io.Writer
	now     func() time.Time
	open    int     // invocations under way in PerInvocation: while any, events wait in pending
	pending []*line // the events of the invocations under way, merged
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

// maxValues is how many values one metric takes in a line (EMF's limit).
const maxValues = 100

// line is one EMF line in the making: its string fields (the dimensions'
// values, and a request's fields that are no dimension), each metric's
// values and the directives that describe them.
type line struct {
	at         time.Time
	fields     map[string]string
	values     map[string][]float64
	directives []directive
}

// fits reports whether ev can join l: no field of either has another value
// in the other (two requests' lines never merge: each has its requestId),
// and no metric of ev has its fill of values in l.
func (l *line) fits(ev *line) bool {
	for k, v := range ev.fields {
		if w, ok := l.fields[k]; ok && w != v {
			return false
		}
	}
	for name := range ev.values {
		if len(l.values[name]) >= maxValues {
			return false
		}
	}
	return true
}

// merge adds ev's fields and values to l. A metric declared in both
// has the same directive (its dimensions are fixed by its name), so l
// keeps its own.
func (l *line) merge(ev *line) {
	for k, v := range ev.fields {
		l.fields[k] = v
	}
	for _, d := range ev.directives {
		if _, ok := l.values[d.Metrics[0].Name]; !ok {
			l.directives = append(l.directives, d)
		}
	}
	for name, vs := range ev.values {
		l.values[name] = append(l.values[name], vs...)
	}
}

// marshal is the line as CloudWatch reads it: a metric of one value as a
// number, of several as an array (each value a sample).
func (l *line) marshal() []byte {
	fields := map[string]any{"_aws": metadata{Timestamp: l.at.UnixMilli(), CloudWatchMetrics: l.directives}}
	for k, v := range l.fields {
		fields[k] = v
	}
	for name, vs := range l.values {
		if len(vs) == 1 {
			fields[name] = vs[0]
		} else {
			fields[name] = vs
		}
	}
	b, _ := json.Marshal(fields) // strings and numbers only: it does not fail
	return append(b, '\n')
}

// event is one metric's value over the dimensions named (none: the
// metric's one series), with those dimensions' values.
type event struct {
	name, unit string
	value      float64
	dims       []string
}

// write writes the events of one occurrence (fields, the values of their
// dimensions and any other fields of the occurrence): at once, or in an
// invocation under way, with its others.
func (m *Metrics) write(fields map[string]string, events ...event) {
	l := &line{at: m.now(), fields: fields, values: map[string][]float64{}}
	for _, e := range events {
		names := e.dims
		if names == nil {
			names = []string{}
		}
		l.directives = append(l.directives, directive{Namespace: Namespace, Dimensions: [][]string{names}, Metrics: []metric{{e.name, e.unit}}})
		l.values[e.name] = []float64{e.value}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open == 0 {
		_, _ = m.w.Write(l.marshal()) // a metric is not worth failing a request for
		return
	}
	for _, p := range m.pending {
		if p.fits(l) {
			p.merge(l)
			return
		}
	}
	m.pending = append(m.pending, l)
}

// PerInvocation returns h, writing the metrics of its invocations at their
// end, in as few lines as they fit in (one for a request's, one for a batch
// of deliveries with the same type and outcome): a log line costs its bytes
// and 26 more, and one line's metadata serves all its events. The lines
// are timed at their first event.
func PerInvocation[In, Out any](m *Metrics, h func(context.Context, In) (Out, error)) func(context.Context, In) (Out, error) {
	return func(ctx context.Context, in In) (Out, error) {
		m.mu.Lock()
		m.open++
		m.mu.Unlock()
		defer m.flush()
		return h(ctx, in)
	}
}

// flush ends an invocation: when none is left under way, it writes what
// waits.
func (m *Metrics) flush() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.open--
	if m.open > 0 {
		return
	}
	var b []byte
	for _, l := range m.pending {
		b = append(b, l.marshal()...)
	}
	m.pending = nil
	if len(b) > 0 {
		_, _ = m.w.Write(b)
	}
}

// RequestServed writes tally_http_requests_total by route, method and code,
// and tally_http_request_duration_seconds by route.
func (m *Metrics) RequestServed(route, method string, status int, took time.Duration) {
	m.RequestLine(route, method, status, took)
}

// RequestLine writes RequestServed's metrics with the request's log fields
// (httpapi.RequestLineObserver) on their line, as properties CloudWatch
// does not make metrics of and Logs Insights queries: in an invocation
// wrapped by PerInvocation, the request's one log line, its clicks' and
// conversions' metrics included. The duration is in whole microseconds:
// the nanoseconds would only lengthen the line.
func (m *Metrics) RequestLine(route, method string, status int, took time.Duration, fields ...slog.Attr) {
	line := map[string]string{"route": route, "method": method, "code": strconv.Itoa(status)}
	for _, f := range fields {
		line[f.Key] = f.Value.String()
	}
	m.write(line,
		event{"tally_http_requests_total", count, 1, []string{"route", "method", "code"}},
		event{"tally_http_request_duration_seconds", seconds, took.Round(time.Microsecond).Seconds(), []string{"route"}})
}

// ClickRecorded writes tally_clicks_total.
func (m *Metrics) ClickRecorded() {
	m.write(map[string]string{}, event{"tally_clicks_total", count, 1, nil})
}

// ConversionEntered writes tally_conversions_total by status.
func (m *Metrics) ConversionEntered(status string) {
	m.write(map[string]string{"status": status}, event{"tally_conversions_total", count, 1, []string{"status"}})
}

// AttemptRecorded writes tally_deliveries_total by type and outcome, and
// tally_delivery_attempt_duration_seconds by type when a request was sent.
func (m *Metrics) AttemptRecorded(deliveryType, outcome string, latency time.Duration, sent bool) {
	events := []event{{"tally_deliveries_total", count, 1, []string{"type", "outcome"}}}
	if sent {
		events = append(events, event{"tally_delivery_attempt_duration_seconds", seconds, latency.Seconds(), []string{"type"}})
	}
	m.write(map[string]string{"type": deliveryType, "outcome": outcome}, events...)
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
	m.write(map[string]string{"FunctionName": function},
		event{"ReconcilerDeferrals", count, float64(d), []string{"FunctionName"}},
		event{"ReconcilerSkipped", count, float64(skipped), []string{"FunctionName"}})
}
