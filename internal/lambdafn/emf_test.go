package lambdafn_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/attempt"
	"github.com/tally-hq/tally/internal/testenv"
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
				v, ok := line[m.Name].(float64)
				if !ok || !slices.Contains([]string{"Count", "Seconds"}, m.Unit) {
					t.Fatalf("metric %s (unit %q) has no number value: %q", m.Name, m.Unit, sc.Text())
				}
				key := m.Name + "{" + strings.Join(dims, ",") + "}"
				samples[key] = append(samples[key], v)
			}
		}
	}
	return samples
}

// The functions publish the local server's counters as EMF lines on their
// stdout: an API function its requests, clicks and conversions; the
// attempt functions their attempts.
func TestFunctionsPublishEMF(t *testing.T) {
	f := newFixture(t, testenv.DynamoDB(t))
	out := &testenv.SyncBuffer{}
	metrics := emf.New(out)
	settings, err := app.ReadSettings()
	if err != nil {
		t.Fatal(err)
	}
	cfg := f.cfg
	cfg.Requests = metrics
	h, err := api.APIHandler(api.Services(f.svc.DB, settings, api.WithObserver(metrics)), cfg, httpapi.GroupClick, httpapi.GroupConversions)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, query, body string) response {
		ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RawPath: path, RawQueryString: query, Body: body,
			Headers: map[string]string{"user-agent": "Mozilla/5.0", "authorization": "Bearer " + f.key, "content-type": "application/json"},
			RequestContext: events.APIGatewayV2HTTPRequestContext{Stage: "$default",
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, SourceIP: "198.51.100.9", Protocol: "HTTP/1.1"}}}
		return invokeAPI(t, f, h, ev)
	}
	wantStatus(t, call("GET", "/c/"+f.offer.ID, "pid="+f.partner.ID, ""), 302)
	wantStatus(t, call("POST", "/api/v1/conversions", "", fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"emf-1"}`, f.offer.ID, f.partner.ID)), 201)

	f.subscribe(t, []string{tally.EventPartnerApplied}, "", 503)
	evt := f.applied(t, "Metered Deals")
	engine := attempt.NewEngine(f.svc.DB, settings, metrics)
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
