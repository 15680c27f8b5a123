package httpapi_test

import (
	"fmt"
	"maps"
	"testing"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Recording a conversion costs one TransactWriteItems (conversion, marker,
// cap counters, rollup, the partner's balance and owed entry, events); the offer read is cached per instance, and
// so is the API key. The one other call is the rate-limit counter that every
// authenticated request pays.
func TestConversionCostsOneTransaction(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	api := dynamotest.NewMeter(client, table)
	e := newEnv(t, dynamo.New(api, table), httpapi.Config{})
	brandID, key := e.brand()
	offerID := e.offer(key, map[string]any{"caps": map[string]any{"daily": 100, "weekly": 500, "monthly": 1000, "global": 5000}})
	partnerID := e.activePartner(brandID, key)
	api.Take()

	post := func(txn string) map[string]int {
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": txn}))
		return api.Take().Calls
	}
	// The key and the offer were cached by this instance when they were made.
	for i := range 6 {
		if got, want := post(fmt.Sprint("order-", i+1)), map[string]int{"TransactWriteItems": 1, "items written": 13, "UpdateItem": 1}; !maps.Equal(got, want) {
			t.Errorf("conversion %d made %v, want %v (offer cached)", i+1, got, want)
		}
	}
	// A replay reads the marker and the conversion it names, and writes nothing.
	e.must(200, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1"}))
	if got, want := api.Take().Calls, map[string]int{"TransactWriteItems": 1, "items written": 13, "GetItem": 2, "UpdateItem": 1}; !maps.Equal(got, want) {
		t.Errorf("replay made %v, want %v", got, want)
	}
}

// On AWS (service.OnAWS) the table's stream adds conversions to
// the rollups and carries them to the fan-out, which makes their events:
// the offer and the partner are read just before the write (strongly
// consistent), and a conversion without caps is two conditional puts
// (the marker holding the conversion's id, then the conversion: 4 WRU with
// the conversion's two index entries, docs/aws.md), one with caps a
// transaction of the marker, the conversion and its cap counters.
func TestConversionOnAWS(t *testing.T) {
	for _, tc := range []struct {
		name  string
		offer map[string]any
		want  map[string]int
		wru   float64
	}{
		{"no caps", nil, map[string]int{"GetItem": 2, "PutItem": 2, "UpdateItem": 1}, 5},
		{"four caps", map[string]any{"caps": map[string]any{"daily": 100, "weekly": 500, "monthly": 1000, "global": 5000}},
			map[string]int{"GetItem": 2, "TransactWriteItems": 1, "items written": 6, "UpdateItem": 1}, 15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, table := dynamotest.NewTable(t)
			api := dynamotest.NewMeter(client, table)
			e := newEnv(t, dynamo.New(api, table), httpapi.Config{}, service.OnAWS())
			brandID, key := e.brand()
			offerID := e.offer(key, tc.offer)
			partnerID := e.activePartner(brandID, key)
			api.Take()
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offerID, "partnerId": partnerID, "externalTxnId": "order-1"}))
			if got := api.Take(); !maps.Equal(got.Calls, tc.want) || got.WRU != tc.wru {
				t.Errorf("conversion made %v, %.1f WRU; want %v, %.1f WRU", got.Calls, got.WRU, tc.want, tc.wru)
			}
		})
	}
}

// On AWS a click leaves its rollups to the stream too: 4 items, 10 WRU of
// the 14 of docs/aws.md's table.
func TestClickOnAWSLeavesRollupsToTheStream(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	api := dynamotest.NewMeter(client, table)
	e := newEnv(t, dynamo.New(api, table), behindProxy(), service.WithStreamRollups())
	brandID, key := e.brand()
	offerID := e.offer(key, clickDest)
	partnerID := e.activePartner(brandID, key)
	e.must(302, e.clickFrom("/c/"+offerID+"?pid="+partnerID, "192.0.2.1", browserUA)) // the instance reads what it caches
	api.Take()
	e.must(302, e.clickFrom("/c/"+offerID+"?pid="+partnerID, "192.0.2.2", browserUA))
	if got, want := api.Take(), map[string]int{"TransactWriteItems": 1, "items written": 4}; !maps.Equal(got.Calls, want) || got.WRU != 10 {
		t.Errorf("a click made %v, %.1f WRU; want %v, 10 WRU (no rollups)", got.Calls, got.WRU, want)
	}
}

// A conversion that names its click reads the click and, in the same
// transaction, marks the click with the conversion (its conversionId). On
// AWS the offer and the partner are read too, and the transaction holds
// the marker, the conversion and the click's mark: 3 × 2 + 4 index
// entries (the conversion's two, the click's two rewritten) + the rate
// counter = 11 WRU.
func TestAttributedConversionCost(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []service.Option
		want map[string]int
		wru  float64
	}{
		{"local", nil, map[string]int{"GetItem": 1, "TransactWriteItems": 1, "items written": 10, "UpdateItem": 1}, 0},
		{"AWS", []service.Option{service.OnAWS()}, map[string]int{"GetItem": 3, "TransactWriteItems": 1, "items written": 3, "UpdateItem": 1}, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, table := dynamotest.NewTable(t)
			api := dynamotest.NewMeter(client, table)
			e := newEnv(t, dynamo.New(api, table), behindProxy(), tc.opts...)
			brandID, key := e.brand()
			offerID := e.offer(key, clickDest)
			partnerID := e.activePartner(brandID, key)
			clickID := clickIDOf(t, e.must(302, e.clickFrom("/c/"+offerID+"?pid="+partnerID, "192.0.2.1", browserUA)))
			api.Take()
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"clickId": clickID, "externalTxnId": "order-1"}))
			if got := api.Take(); !maps.Equal(got.Calls, tc.want) || tc.wru > 0 && got.WRU != tc.wru {
				t.Errorf("a conversion by clickId made %v, %.1f WRU; want %v, %.1f WRU", got.Calls, got.WRU, tc.want, tc.wru)
			}
		})
	}
}

// A click costs one TransactWriteItems of 6 items (the click, the offer and
// partner checks, the daily and quarter-hour rollups, the velocity
// counter); the offer, its brand and the fraud settings are read once per
// instance and cached. A high-risk click adds its hour's counter and the
// fraud.high_risk event, and with the auto-ban rule on, one Query of the
// window's earlier hours. docs/aws.md prices these counts.
func TestClickCostsOneTransaction(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	api := dynamotest.NewMeter(client, table)
	st := dynamo.New(api, table)
	e := newEnv(t, st, behindProxy())
	brandID, key := e.brand()
	offerID := e.offer(key, clickDest)
	partnerID := e.activePartner(brandID, key)
	link := "/c/" + offerID + "?pid=" + partnerID

	// A fresh instance, as a newly started Lambda: it reads what it caches.
	fresh := newEnv(t, st, behindProxy())
	api.Take()
	fresh.must(302, fresh.clickFrom(link, "192.0.2.1", browserUA))
	if got, want := api.Take().Calls, map[string]int{"GetItem": 3, "Query": 1, "TransactWriteItems": 1, "items written": 6}; !maps.Equal(got, want) {
		t.Errorf("the first click of an instance made %v, want %v (offer reference, offer, fraud settings, blocked ranges, then the click)", got, want)
	}
	for i := range 5 {
		fresh.must(302, fresh.clickFrom(link, fmt.Sprint("192.0.2.", 10+i), browserUA))
		if got, want := api.Take().Calls, map[string]int{"TransactWriteItems": 1, "items written": 6}; !maps.Equal(got, want) {
			t.Errorf("click %d made %v, want %v", i+2, got, want)
		}
	}
	fresh.must(302, fresh.clickFrom(link, "192.0.2.50", "curl/8.5.0"))
	if got, want := api.Take().Calls, map[string]int{"TransactWriteItems": 1, "items written": 8}; !maps.Equal(got, want) {
		t.Errorf("a high-risk click made %v, want %v", got, want)
	}
	// The instance that changes the settings reads them again at once.
	e.must(302, e.clickFrom(link, "192.0.2.51", browserUA))
	api.Take()
	e.must(200, e.call("PUT", "/api/v1/fraud/settings", key, map[string]any{"threshold": 70,
		"autoBan": map[string]any{"enabled": true, "highRiskClicks": 100, "windowHours": 24}}))
	if got, want := api.Take().Calls, map[string]int{"UpdateItem": 1, "GetItem": 1, "TransactWriteItems": 1, "items written": 2}; !maps.Equal(got, want) {
		t.Errorf("changing the settings made %v, want %v (the rate counter, the settings as they were for the audit log, then the settings and their audit entry)", got, want)
	}
	e.must(302, e.clickFrom(link, "192.0.2.52", "curl/8.5.0"))
	if got, want := api.Take().Calls, map[string]int{"GetItem": 1, "Query": 2, "TransactWriteItems": 1, "items written": 8}; !maps.Equal(got, want) {
		t.Errorf("a high-risk click under the auto-ban rule made %v, want %v (settings and blocked ranges again, the window's earlier hours, the click)", got, want)
	}
}

// A client repeating a key that matches none gets 401 each time, and the
// instance reads the key's item for it once: the miss is remembered for a
// few seconds (a negative cache), so a misconfigured client costs no read
// per request.
func TestUnknownKeyCostsOneRead(t *testing.T) {
	client, table := dynamotest.NewTable(t)
	api := dynamotest.NewMeter(client, table)
	e := newEnv(t, dynamo.New(api, table), httpapi.Config{})
	api.Take()
	const wrong = "tally_sk_000000000000000000000000000000000000000000000000"
	for range 10 {
		e.must(401, e.call("GET", "/api/v1/offers", wrong, nil))
	}
	// Each refused request still counts against the client's rate limit
	// (one UpdateItem); the key is read once.
	if got, want := api.Take().Calls, map[string]int{"GetItem": 1, "UpdateItem": 10}; !maps.Equal(got, want) {
		t.Errorf("10 requests with an unknown key made %v, want %v", got, want)
	}
	// A real key is not held back by it.
	_, key := e.brand()
	api.Take()
	e.must(200, e.call("GET", "/api/v1/offers", key, nil))
}
