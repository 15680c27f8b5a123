package cli_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// scrape reads a Prometheus text exposition into its samples, keyed as
// written: name{label="value",…} (labels sorted by name).
func scrape(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("scrape: status %d: %s", resp.StatusCode, body)
	}
	samples := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("scrape: line %q: %v", line, err)
		}
		samples[line[:i]] = v
	}
	return samples
}

// `tally serve --metrics` counts what happens, on its own listener: after
// clicks, conversions and their webhook deliveries to a loopback receiver,
// the counters moved by as much, on the embedded store and on DynamoDB;
// the API's listener has no /metrics, and the metrics' has no API.
func TestMetricsCountTraffic(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		environ func(t *testing.T) []string
	}{
		{"embedded", func(*testing.T) []string { return env("TALLY_RATE_LIMIT=1000") }},
		{"dynamodb", func(t *testing.T) []string { return dynamoEnviron(t, env("TALLY_RATE_LIMIT=1000")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			environ := tc.environ(t)
			data := t.TempDir()
			brandID, _, key := setupBrand(t, environ, data, "Acme")
			metricsAddr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
			s := serve(t, environ, "--data", data, "--metrics", metricsAddr)
			rcv := newHookReceiver(t, "metrics", "metrics-secret-0123456789", nil, func(int) int { return 200 })

			offerID := str(s.call(t, "POST", "/api/v1/offers", key, offerInput("Metered")).expect(t, "POST /api/v1/offers", 201).object(t), "id")
			partnerID := str(s.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "",
				map[string]any{"name": "Pat Partner", "email": "pat@example.com"}).expect(t, "apply as a partner", 201).object(t), "id")
			s.call(t, "POST", "/api/v1/partners/"+partnerID+"/approve", key, nil).expect(t, "approve the partner", 200)
			s.call(t, "POST", "/api/public/webhooks", key, map[string]any{
				"url": rcv.url(), "events": []string{"conversion.created"}, "secret": rcv.secret,
			}).expect(t, "subscribe", 201)

			before := scrape(t, metricsAddr)
			noRedirects := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
			for range 3 {
				resp, err := noRedirects.Get("http://" + s.addr + "/c/" + offerID + "?pid=" + partnerID)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != 302 {
					t.Fatalf("click: status %d, want 302", resp.StatusCode)
				}
			}
			for i := range 2 {
				s.call(t, "POST", "/api/v1/conversions", key, map[string]any{
					"offerId": offerID, "partnerId": partnerID, "externalTxnId": fmt.Sprintf("metered-%d", i),
				}).expect(t, "POST /api/v1/conversions", 201)
			}
			const delivered = `tally_deliveries_total{outcome="succeeded",type="webhook"}`
			waitUntil(t, "both deliveries counted", func() bool {
				return scrape(t, metricsAddr)[delivered]-before[delivered] == 2
			}, s)
			after := scrape(t, metricsAddr)

			for series, want := range map[string]float64{
				`tally_clicks_total`:                                                                3,
				`tally_conversions_total{status="approved"}`:                                        2,
				`tally_http_requests_total{code="302",method="GET",route="/c/{offerId}"}`:           3,
				`tally_http_requests_total{code="201",method="POST",route="/api/v1/conversions"}`:   2,
				`tally_http_request_duration_seconds_count{route="/api/v1/conversions"}`:            2,
				`tally_http_request_duration_seconds_bucket{route="/api/v1/conversions",le="+Inf"}`: 2,
				delivered: 2,
				`tally_deliveries_total{outcome="retrying",type="webhook"}`:              0,
				`tally_delivery_attempt_duration_seconds_count{type="webhook"}`:          2,
				`tally_delivery_attempt_duration_seconds_bucket{type="webhook",le="10"}`: 2,
			} {
				if got := after[series] - before[series]; got != want {
					t.Errorf("%s moved by %v, want %v", series, got, want)
				}
			}
			for _, series := range []string{"tally_deliveries_due", "tally_delivery_lag_seconds"} {
				if v, ok := after[series]; !ok || v != 0 {
					t.Errorf("%s = %v (present: %v); want 0 with every delivery made", series, v, ok)
				}
			}

			s.call(t, "GET", "/metrics", "", nil).expect(t, "GET /metrics on the API's listener", 404)
			resp, err := httpClient.Get("http://" + metricsAddr + "/api/v1/offers")
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != 404 {
				t.Errorf("GET /api/v1/offers on the metrics listener: status %d, want 404", resp.StatusCode)
			}
		})
	}
}
