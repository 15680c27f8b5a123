package httpapi_test

import (
	"encoding/csv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// ?format=csv and Accept: text/csv answer the JSON report's rows as CSV,
// with a header line, in the time zone asked for.
func TestReportCSVHasTheJSONRows(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		start := testenv.Start()
		clock := testenv.NewClock(start.Add(12*time.Hour + 30*time.Minute)) // 22:30 UTC
		from, to := start.Format(time.DateOnly), start.AddDate(0, 0, 1).Format(time.DateOnly)
		e := newEnv(t, st, httpapi.Config{}, service.WithClock(clock.Now))
		brandID, key := e.brand()
		offerID := e.offer(key, nil)
		partners := []string{e.activePartner(brandID, key), e.activePartner(brandID, key)}
		for i := range 12 {
			clock.Advance(45 * time.Minute) // from 23:15 UTC on, across midnight UTC and in Kolkata
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{
				"offerId": offerID, "partnerId": partners[i%2], "revenueCents": 1000 + i, "payoutCents": 300, "currency": []string{"USD", "EUR"}[i%3/2],
			}))
		}
		q := "/api/v1/reports?from=" + from + "&to=" + to + "&groupBy=day,partner&timezone=Asia/Kolkata"
		var report struct {
			Data []struct {
				Day, PartnerID, Currency                           string
				Conversions, Pending, Approved, Rejected, Reversed int64
				RevenueCents, PayoutCents, ProfitCents             int64
				Clicks, HighRiskClicks                             int64
			}
			Timezone string
		}
		e.must(200, e.call("GET", q, key, nil)).decode(t, &report)
		if report.Timezone != "Asia/Kolkata" || len(report.Data) < 3 {
			t.Fatalf("report: %+v", report)
		}
		var want [][]string
		want = append(want, []string{"day", "partnerId", "currency", "conversions", "pending", "approved", "rejected", "reversed", "revenueCents", "payoutCents", "profitCents", "clicks", "highRiskClicks"})
		for _, r := range report.Data {
			line := []string{r.Day, r.PartnerID, r.Currency}
			for _, n := range []int64{r.Conversions, r.Pending, r.Approved, r.Rejected, r.Reversed, r.RevenueCents, r.PayoutCents, r.ProfitCents, r.Clicks, r.HighRiskClicks} {
				line = append(line, strconv.FormatInt(n, 10))
			}
			want = append(want, line)
		}

		check := func(name string, resp response) {
			t.Helper()
			if resp.status != 200 || resp.header.Get("Content-Type") != "text/csv; charset=utf-8" ||
				resp.header.Get("Content-Disposition") != `attachment; filename="tally-report-`+from+`-to-`+to+`.csv"` {
				t.Errorf("%s: %d %v", name, resp.status, resp.header)
			}
			got, err := csv.NewReader(strings.NewReader(string(resp.body))).ReadAll()
			if err != nil || !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("%s CSV:\n%s\nwant %q (%v)", name, resp.body, want, err)
			}
		}
		check("format=csv", e.must(200, e.call("GET", q+"&format=csv", key, nil)))
		req, _ := http.NewRequest("GET", e.srv.URL+q, nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Accept", "text/csv, application/json;q=0.5")
		resp, err := e.send(req)
		if err != nil {
			t.Fatal(err)
		}
		check("Accept: text/csv", resp)

		// JSON stays the default, and wins when listed first.
		req.Header.Set("Accept", "application/json, text/csv")
		if resp, _ := e.send(req); resp.header.Get("Content-Type") != "application/json" {
			t.Errorf("Accept: application/json, text/csv answered %s", resp.header.Get("Content-Type"))
		}
		if r := e.call("GET", q+"&format=json", key, nil); r.header.Get("Content-Type") != "application/json" {
			t.Errorf("format=json answered %s", r.header.Get("Content-Type"))
		}
		for _, bad := range []string{"&format=xml", "&timezone=Mars/Base", "&timezone=Local"} {
			if r := e.call("GET", strings.Replace(q, "&timezone=Asia/Kolkata", "", 1)+bad, key, nil); r.status != 422 || r.errorCode() != "validation_error" {
				t.Errorf("%s: %d %s", bad, r.status, r.body)
			}
		}
		// Without grouping: one row per currency.
		r := e.must(200, e.call("GET", "/api/v1/reports?from="+from+"&to="+to+"&format=csv", key, nil))
		if lines := strings.Split(strings.TrimSpace(string(r.body)), "\n"); len(lines) != 3 || lines[0] != "currency,conversions,pending,approved,rejected,reversed,revenueCents,payoutCents,profitCents,clicks,highRiskClicks" {
			t.Errorf("ungrouped CSV:\n%s", r.body)
		}
	})
}
