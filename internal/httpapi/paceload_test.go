package httpapi_test

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/testenv"
)

// TestPaceLoad measures, when TALLY_PACE_LOAD is set, the deliveries a
// second to a subscription at maxPerSecond 100 beside an unpaced one, both
// subscribed to the conversions that 8 clients make as fast as they can
// (docs/contract.md, per-endpoint pace). It asserts nothing the pace test
// does not; it prints the figures.
func TestPaceLoad(t *testing.T) {
	if os.Getenv("TALLY_PACE_LOAD") == "" {
		t.Skip("set TALLY_PACE_LOAD=1 to measure")
	}
	const pace, conversions, clients = 100, 2000, 8
	e := newPipelineEnv(t, testenv.Bolt(t))
	brandID, key := e.brand()
	partner := e.activePartner(brandID, key)
	offer := e.offer(key, nil)
	paced, free := newTimingReceiver(t), newTimingReceiver(t)
	e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": paced.srv.URL, "events": []string{"conversion.created"}, "maxPerSecond": pace}))
	e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": free.srv.URL, "events": []string{"conversion.created"}}))
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; i < conversions; i += clients {
				e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": fmt.Sprintf("load-%d", i)}))
			}
		})
	}
	wg.Wait()
	made := time.Since(start)
	deadline := time.Now().Add(2 * time.Minute)
	for len(paced.times()) < conversions && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	rate := func(at []time.Time) float64 { return float64(len(at)-1) / at[len(at)-1].Sub(at[0]).Seconds() }
	f, p := free.times(), paced.times()
	t.Logf("%d conversions made in %v (%.0f/s)", conversions, made.Round(time.Millisecond), float64(conversions)/made.Seconds())
	t.Logf("unpaced: %d deliveries, %.0f/s, the last %v after the last conversion", len(f), rate(f), f[len(f)-1].Sub(start.Add(made)).Round(time.Millisecond))
	t.Logf("paced at %d/s: %d deliveries, %.1f/s, most in any second %d", pace, len(p), rate(p), maxInWindow(p, time.Second))
}
