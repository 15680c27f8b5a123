package lambdafn_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
)

// emfSamples reads CloudWatch Embedded Metric Format lines as CloudWatch
// does: each metric a directive names, in the namespace Tally, is a number
// field of the line, and its dimensions string fields. It returns each
// metric's values keyed name{dimension=value,…}, failing the test for a
// line CloudWatch would not take.
func emfSamples(t *testing.T, out string) map[string][]float64 {
	t.Helper()
	samples := map[string][]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON object: %q", sc.Text())
		}
		var meta struct {
			Timestamp         int64
			CloudWatchMetrics []struct {
				Namespace  string
				Dimensions [][]string
				Metrics    []struct{ Name, Unit string }
			}
		}
		raw, _ := json.Marshal(line["_aws"])
		if err := json.Unmarshal(raw, &meta); err != nil || meta.Timestamp == 0 || len(meta.CloudWatchMetrics) == 0 {
			t.Fatalf("no EMF metadata (_aws with a Timestamp and CloudWatchMetrics): %q", sc.Text())
		}
		for _, d := range meta.CloudWatchMetrics {
			if d.Namespace != emf.Namespace || len(d.Dimensions) != 1 {
				t.Fatalf("directive in namespace %q with %d dimension sets, want Tally and one: %q", d.Namespace, len(d.Dimensions), sc.Text())
			}
			var dims []string
			for _, name := range d.Dimensions[0] {
				v, ok := line[name].(string)
				if !ok {
					t.Fatalf("dimension %s has no string value: %q", name, sc.Text())
				}
				dims = append(dims, name+"="+v)
			}
			for _, m := range d.Metrics {
				vs, ok := values(line[m.Name])
				if !ok || !slices.Contains([]string{"Count", "Seconds"}, m.Unit) {
					t.Fatalf("metric %s (unit %q) has no number value nor array of up to 100: %q", m.Name, m.Unit, sc.Text())
				}
				key := m.Name + "{" + strings.Join(dims, ",") + "}"
				samples[key] = append(samples[key], vs...)
			}
		}
	}
	return samples
}

// values is a metric's value in an EMF line: a number, or an array of up
// to 100 numbers, each a sample.
func values(v any) ([]float64, bool) {
	if n, ok := v.(float64); ok {
		return []float64{n}, true
	}
	a, ok := v.([]any)
	if !ok || len(a) == 0 || len(a) > 100 {
		return nil, false
	}
	out := make([]float64, len(a))
	for i, x := range a {
		if out[i], ok = x.(float64); !ok {
			return nil, false
		}
	}
	return out, true
}

// emfAPI is the click and conversion routes of an API function whose
// metrics are written to out, on a new fixture, with the settings they use.
func emfAPI(t *testing.T) (f *fixture, metrics *emf.Metrics, out *testenv.SyncBuffer, settings app.Settings, h api.APIFunc) {
	f = newFixture(t, testenv.DynamoDB(t))
	out = &testenv.SyncBuffer{}
	metrics = emf.New(out)
	settings, err := app.ReadSettings()
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg
	cfg.Requests = metrics
	h, err = api.APIHandler(api.Services(f.svc.DB, settings, api.WithObserver(metrics)), cfg, httpapi.GroupClick, httpapi.GroupConversions)
	if err != nil {
		t.Fatal(err)
	}
	return f, metrics, out, settings, h
}

// emfRequest is a request of the fixture's API key.
func emfRequest(f *fixture, method, path, query, body string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: path, RawQueryString: query, Body: body,
		Headers: map[string]string{"user-agent": "Mozilla/5.0", "authorization": "Bearer " + f.key, "content-type": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, SourceIP: "198.51.100.9", Protocol: "HTTP/1.1"}}}
}

// The functions publish the local server's counters as EMF lines on their
// stdout: an API function its requests, clicks and conversions; the
// attempt functions their attempts.
func TestFunctionsPublishEMF(t *testing.T) {
	f, metrics, out, settings, h := emfAPI(t)
	call := func(method, path, query, body string) response {
		return invokeAPI(t, f, h, emfRequest(f, method, path, query, body))
	}
	wantStatus(t, call("GET", "/c/"+f.offer.ID, "pid="+f.partner.ID, ""), 302)
	wantStatus(t, call("POST", "/api/v1/conversions", "", fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"emf-1"}`, f.offer.ID, f.partner.ID)), 201)

	f.subscribe(t, []string{tally.EventPartnerApplied}, "", 503)
	evt := f.applied(t, "Metered Deals")
	engine := attempt.NewEngine(f.svc.DB, settings, metrics, secretbox.New(f.svc.DB.Store, secretbox.Unwrapped{}))
	refs, err := engine.FanOut(t.Context(), evt.ID)
	if err != nil || len(refs) != 1 {
		t.Fatalf("fan-out: %v, %v", refs, err)
	}
	if _, err := engine.Attempt(t.Context(), refs[0], 1, f.sender); err != nil {
		t.Fatal(err)
	}

	got := emfSamples(t, out.String())
	for key, want := range map[string][]float64{
		"tally_http_requests_total{route=/c/{offerId},method=GET,code=302}":         {1},
		"tally_http_requests_total{route=/api/v1/conversions,method=POST,code=201}": {1},
		"tally_clicks_total{}":                                  {1},
		"tally_conversions_total{status=approved}":              {1},
		"tally_deliveries_total{type=webhook,outcome=retrying}": {1},
	} {
		if !slices.Equal(got[key], want) {
			t.Errorf("%s: %v, want %v", key, got[key], want)
		}
	}
	for _, key := range []string{"tally_http_request_duration_seconds{route=/c/{offerId}}",
		"tally_http_request_duration_seconds{route=/api/v1/conversions}", "tally_delivery_attempt_duration_seconds{type=webhook}"} {
		if v := got[key]; len(v) != 1 || v[0] < 0 { // an attempt's latency is in whole milliseconds: 0 on loopback
			t.Errorf("%s: %v, want one duration", key, v)
		}
	}
	if t.Failed() {
		t.Logf("the lines:\n%s", out)
	}
}

// An invocation's metrics are written at its end in as few lines as they
// fit in: a conversion request's in one line, a batch's attempts in one
// line per outcome (their attempts sent at once), each event a sample as
// before.
func TestFunctionsPublishEMFOncePerInvocation(t *testing.T) {
	f, metrics, out, _, h := emfAPI(t)
	ev := emfRequest(f, "POST", "/api/v1/conversions", "", fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"emf-once"}`, f.offer.ID, f.partner.ID))
	wantStatus(t, invokeAPI(t, f, emf.PerInvocation(metrics, h), ev), 201)
	if lines := strings.Count(out.String(), "\n"); lines != 1 {
		t.Errorf("a conversion request wrote %d EMF lines, want 1:\n%s", lines, out)
	}

	batch := emf.PerInvocation(metrics, func(context.Context, int) (int, error) {
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				outcome := webhooks.OutcomeSucceeded
				if i%4 == 0 {
					outcome = webhooks.OutcomeRetrying
				}
				metrics.AttemptRecorded(tally.DeliveryWebhook, outcome, time.Duration(i)*time.Millisecond, true)
			})
		}
		wg.Wait()
		return 0, nil
	})
	before := out.String()
	if _, err := batch(t.Context(), 0); err != nil {
		t.Fatal(err)
	}
	written := strings.TrimPrefix(out.String(), before)
	if lines := strings.Count(written, "\n"); lines != 2 {
		t.Errorf("a batch of 12 attempts with 2 outcomes wrote %d EMF lines, want 2:\n%s", lines, written)
	}
	got := emfSamples(t, written)
	if n := len(got["tally_deliveries_total{type=webhook,outcome=succeeded}"]); n != 9 {
		t.Errorf("succeeded: %d samples, want 9", n)
	}
	if n := len(got["tally_deliveries_total{type=webhook,outcome=retrying}"]); n != 3 {
		t.Errorf("retrying: %d samples, want 3", n)
	}
	if n := len(got["tally_delivery_attempt_duration_seconds{type=webhook}"]); n != 12 {
		t.Errorf("attempt durations: %d samples, want 12", n)
	}
	if t.Failed() {
		t.Logf("the lines:\n%s", out)
	}
}

// A request through an API function writes one log line: its metrics as
// EMF, with the fields that find it (requestId, traceId, brandId, and the
// path when it is not the route's pattern) beside them, and no line of the
// logger's; the line is valid EMF as CloudWatch reads it, and the request's
// fields are no metrics' dimensions.
func TestRequestWritesOneLine(t *testing.T) {
	f, metrics, out, _, h := emfAPI(t)
	h = emf.PerInvocation(metrics, h)
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, c := range []struct {
		name, method, path, body, route, code, path2 string
	}{
		{"posted", "POST", "/api/v1/conversions", fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"one-line"}`, f.offer.ID, f.partner.ID),
			"/api/v1/conversions", "201", ""},
		{"read", "GET", "/api/v1/conversions/" + f.conversion.ID, "", "/api/v1/conversions/{id}", "200", "/api/v1/conversions/" + f.conversion.ID},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := out.String()
			ev := emfRequest(f, c.method, c.path, "", c.body)
			ev.Headers["traceparent"] = traceparent
			r := invokeAPI(t, f, h, ev)
			written := strings.TrimPrefix(out.String(), before)
			if lines := strings.Count(written, "\n"); lines != 1 || len(r.logs) != 0 {
				t.Fatalf("the request wrote %d EMF lines and %d lines through its logger, want 1 and none:\n%s%v", lines, len(r.logs), written, r.logs)
			}
			samples := emfSamples(t, written)
			key := fmt.Sprintf("tally_http_requests_total{route=%s,method=%s,code=%s}", c.route, c.method, c.code)
			if !slices.Equal(samples[key], []float64{1}) || len(samples["tally_http_request_duration_seconds{route="+c.route+"}"]) != 1 {
				t.Errorf("samples %v, want %s and its duration", samples, key)
			}
			var line map[string]any
			if err := json.Unmarshal([]byte(written), &line); err != nil {
				t.Fatal(err)
			}
			want := map[string]any{"requestId": r.header("X-Request-Id"), "traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "brandId": f.brand.ID}
			if c.path2 != "" {
				want["path"] = c.path2
			}
			for k, v := range want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v", k, line[k], v)
				}
			}
			absent := []string{"msg", "level", "time", "durationMs", "spanId", "apigwRequestId", "awsRequestId"}
			if c.path2 == "" {
				absent = append(absent, "path")
			}
			for _, k := range absent {
				if line[k] != nil {
					t.Errorf("the line has %s (%v): redundant with its other fields, or constant", k, line[k])
				}
			}
			if c.code == "201" && line["status"] != tally.ConversionApproved {
				t.Errorf("status = %v, want the conversion's status (tally_conversions_total's dimension)", line["status"])
			}
			t.Logf("the line (%d bytes): %s", len(written), written)
		})
	}
}
