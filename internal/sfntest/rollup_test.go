package sfntest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"sync"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/rollup"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// TestRollupsFromTheStreamAreExact records conversions through the
// conversions function as deployed (its service leaves rollups to the
// stream), and clicks, some of them high-risk, reads the table's stream on DynamoDB Local, filters it as the
// rollup function's mapping does, and hands the records to the rollup
// function the ways Lambda may: split over two shards, a batch repeated, a
// batch bisected after it was applied, a retry racing the invocation that
// timed out. The report equals the raw conversions.
func TestRollupsFromTheStreamAreExact(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	key, offerID, partnerID := f.conversionSetup(t)
	svc, post := f.conversionsFunction(t, key)
	const n = 30
	var convs []tally.Conversion
	for i := range n {
		currency := []string{"EUR", "USD"}[i%2]
		convs = append(convs, post(fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"order-%d","revenueCents":%d,"payoutCents":%d,"currency":%q}`,
			offerID, partnerID, i, 1000+i*37, 200+i*11, currency)))
	}
	settings, err := svc.Clicks.FraudSettings(t.Context(), f.brand.ID)
	if err != nil {
		t.Fatal(err)
	}
	var clickCount, highRisk int64
	for i := range n {
		ua := "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"
		if i%4 == 0 {
			ua = "" // a missing User-Agent raises the score
		}
		c, _, err := svc.Clicks.RecordClick(t.Context(), clicks.ClickInput{OfferID: offerID, PartnerID: partnerID, IP: netip.MustParseAddr("198.51.100.7"), UserAgent: ua})
		if err != nil {
			t.Fatal(err)
		}
		clickCount++
		if c.FraudScore > settings.Threshold {
			highRisk++
		}
	}
	if highRisk == 0 || highRisk == clickCount {
		t.Fatalf("%d of %d clicks are high-risk: the test wants both kinds", highRisk, clickCount)
	}
	day := convs[0].CreatedAt.UTC().Format("2006-01-02")
	report := func() []tally.ReportRow {
		t.Helper()
		r, err := svc.Reports.Report(t.Context(), f.brand.ID, reports.ReportQuery{From: day, To: day})
		if err != nil {
			t.Fatal(err)
		}
		return r.Data
	}
	if rows := report(); len(rows) != 0 {
		t.Fatalf("before the stream was read, the report has %+v: the conversions or clicks added to the rollups themselves", rows)
	}

	var records []events.DynamoDBEventRecord
	patterns := filterPatterns(t, "RollupFunction")
	for _, rec := range f.readStream(t) {
		if matchesAny(t, patterns, rec) {
			records = append(records, rec)
		}
	}
	if len(records) != 2*n {
		t.Fatalf("the rollup filter passed %d records, want the %d conversions and %d clicks", len(records), n, n)
	}
	// Two shards, each in stream order.
	var shardA, shardB []events.DynamoDBEventRecord
	for i, rec := range records {
		if i%3 == 0 {
			shardB = append(shardB, rec)
		} else {
			shardA = append(shardA, rec)
		}
	}
	h := rollup.Handler(svc.Reports, f.log)
	invoke := func(shard string, recs []events.DynamoDBEventRecord) {
		ev := events.DynamoDBTimeWindowEvent{DynamoDBEvent: events.DynamoDBEvent{Records: recs}}
		ev.ShardID, ev.EventSourceARN = shard, recs[0].EventSourceArn
		resp, err := h(lambdaContext(t.Context(), "rollup"), roundTrip(t, ev))
		if err != nil || resp.State == nil {
			t.Errorf("rollup of %d records of %s: %v, state %v", len(recs), shard, err, resp.State)
		}
	}
	const a, b = "shardId-00000001795300000000-aaaaaaaa", "shardId-00000001795300000000-bbbbbbbb"
	invoke(a, shardA)
	invoke(a, shardA)                 // the same batch again
	invoke(a, shardA[:len(shardA)/2]) // bisected after it was applied
	invoke(a, shardA[len(shardA)/2:])
	invoke(b, shardB[:2])
	var wg sync.WaitGroup
	for range 3 { // retries racing the invocation that timed out
		wg.Go(func() { invoke(b, shardB) })
	}
	wg.Wait()

	want := map[string]*tally.ReportRow{}
	for _, c := range convs {
		r := want[c.Currency]
		if r == nil {
			r = &tally.ReportRow{Currency: c.Currency}
			want[c.Currency] = r
		}
		r.Conversions++
		r.Approved++
		r.RevenueCents += c.RevenueCents
		r.PayoutCents += c.PayoutCents
		r.ProfitCents = r.RevenueCents - r.PayoutCents
	}
	want["EUR"].Clicks, want["EUR"].HighRiskClicks = clickCount, highRisk // the offer's currency
	if got := report(); len(got) != 2 || !reflect.DeepEqual(got[0], *want[got[0].Currency]) || !reflect.DeepEqual(got[1], *want[got[1].Currency]) {
		t.Errorf("report %+v, want %+v and %+v", got, *want["EUR"], *want["USD"])
	}

	// The partner's balance came with the rollups, once, and a payout
	// claims the owed entries the batches summed.
	balances, err := svc.Payouts.Balance(t.Context(), f.brand.ID, partnerID)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range balances.Data {
		if w := want[b.Currency]; b != (tally.Balance{Currency: b.Currency, OwedCents: w.PayoutCents}) {
			t.Errorf("balance %+v, want %d owed", b, w.PayoutCents)
		}
	}
	if len(balances.Data) != 2 {
		t.Errorf("balances %+v, want EUR and USD", balances.Data)
	}
	p, err := svc.Payouts.CreatePayout(t.Context(), f.brand.ID, payouts.CreateInput{Currency: ptr("USD")})
	if err != nil || p.TotalCents != want["USD"].PayoutCents || p.Conversions != want["USD"].Approved {
		t.Errorf("payout %+v (%v), want %d cents for %d conversions", p, err, want["USD"].PayoutCents, want["USD"].Approved)
	}
}

// conversionsFunction returns the service of the conversions function as
// deployed (it leaves rollups to the stream) and a way to post a conversion
// through that function with key.
func (f *fixture) conversionsFunction(t *testing.T, key string) (*service.Service, func(body string) tally.Conversion) {
	t.Helper()
	svc := servicetest.New(dynamo.New(f.client, f.table), service.WithStreamRollups())
	handler, err := api.APIHandler(svc.API(), httpapi.Config{Logger: f.log}, httpapi.GroupConversions)
	if err != nil {
		t.Fatal(err)
	}
	return svc, func(body string) tally.Conversion {
		t.Helper()
		resp, err := handler(lambdaContext(t.Context(), "conversions"), roundTrip(t, apiEvent("POST", "/api/v1/conversions", key, body)))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /api/v1/conversions: %v, status %d: %s", err, resp.StatusCode, resp.Body)
		}
		var c tally.Conversion
		if err := json.Unmarshal([]byte(resp.Body), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
}
