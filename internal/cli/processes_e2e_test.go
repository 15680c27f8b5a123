package cli_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/dynamotest"
)

// dynamoEnviron points the binary at a fresh table on DynamoDB Local.
func dynamoEnviron(t *testing.T, environ []string) []string {
	t.Helper()
	_, table := dynamotest.NewTable(t)
	return append(environ, "TALLY_TABLE="+table, "AWS_ENDPOINT_URL="+dynamotest.Endpoint(t),
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=x", "AWS_SECRET_ACCESS_KEY=x")
}

// Two `tally serve` processes on one table race for the same due
// deliveries, and the receiver gets exactly one request per attempt.
//
// A first server makes attempts 1 and 2 of 100 deliveries (the receiver
// answers 500 to both) and stops; two servers started together then both
// find attempt 3 of each due at the same moments (5 s after attempt 2;
// the first server may have made it for the deliveries it began with) and
// both go for it. Each attempt is claimed in the table before it is sent,
// so one of them sends it: the receiver counts three requests per webhook
// id, the delivery log three attempts, and both servers made some. The
// receiver holds the first attempts 3 until two are in flight at once:
// as a server starts an endpoint at one attempt in flight, they are one
// from each server, so neither can have sent everything before the other
// was up (on a loaded machine, one server may start seconds later).
func TestServersSharingATableSendEachAttemptOnce(t *testing.T) {
	const conversions = 100
	// Failed deliveries must not disable the endpoint.
	environ := dynamoEnviron(t, env("TALLY_RATE_LIMIT=1000000", "TALLY_LOG_LEVEL=debug", "TALLY_ENDPOINT_DISABLE_FAILURES=1000"))
	brandID, _, key := setupBrand(t, environ, t.TempDir(), "Acme")
	rcv := newHookReceiver(t, "shared", "shared-secret-0123456789", nil, func(n int) int {
		if n <= 2 {
			return 500
		}
		return 200
	})

	first := serve(t, environ)
	offerID := str(first.call(t, "POST", "/api/v1/offers", key, offerInput("Hooks")).expect(t, "POST /api/v1/offers", 201).object(t), "id")
	partnerID := str(first.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "",
		map[string]any{"name": "Pat Partner", "email": "pat@example.com"}).expect(t, "apply as a partner", 201).object(t), "id")
	first.call(t, "POST", "/api/v1/partners/"+partnerID+"/approve", key, nil).expect(t, "approve the partner", 200)
	first.call(t, "POST", "/api/public/webhooks", key, map[string]any{
		"url": rcv.url(), "events": []string{"conversion.created"}, "secret": rcv.secret,
	}).expect(t, "subscribe", 201)
	for i := range conversions {
		first.call(t, "POST", "/api/v1/conversions", key, map[string]any{
			"offerId": offerID, "partnerId": partnerID, "externalTxnId": fmt.Sprintf("shared-%03d", i),
		}).expect(t, "POST /api/v1/conversions", 201)
	}
	waitUntil(t, "attempts 1 and 2 of every delivery", func() bool {
		twice := 0
		for _, reqs := range rcv.snapshot() {
			if len(reqs) >= 2 {
				twice++
			}
		}
		return twice == conversions
	}, first)
	first.stop(t)

	release := make(chan struct{})
	rcv.mu.Lock()
	rcv.release, rcv.hold = release, func(r *hookRequest) bool { return r.n == 3 }
	rcv.mu.Unlock()
	servers := []*server{startServer(t, environ), startServer(t, environ)}
	for _, s := range servers {
		if err := s.waitReady(15 * time.Second); err != nil {
			t.Fatalf("server did not come up: %v\nstderr:\n%s", err, s.stderr)
		}
	}
	// Before an attempt's 10 s timeout: a held attempt must not fail.
	heldDeadline := time.Now().Add(8 * time.Second)
	for _, held := rcv.counts(); held < 2 && time.Now().Before(heldDeadline); _, held = rcv.counts() {
		time.Sleep(20 * time.Millisecond)
	}
	close(release)
	var ds []deliveryView
	waitUntil(t, "every delivery to succeed", func() bool {
		ds = servers[0].listDeliveries(t, key, nil)
		done := 0
		for _, d := range ds {
			if d.Status == "succeeded" {
				done++
			}
		}
		return done == conversions
	}, servers...)
	for _, s := range servers {
		s.stop(t)
	}
	for id, reqs := range rcv.snapshot() {
		if len(reqs) != 3 {
			t.Errorf("%s: the receiver got %d requests, want 3 (one per attempt)", id, len(reqs))
		}
	}
	for _, d := range ds {
		if len(d.Attempts) != 3 {
			t.Errorf("%s: %d attempts in the log, want 3", d.ID, len(d.Attempts))
		}
	}
	for i, s := range servers {
		sent := 0
		for _, l := range s.logLines(t) {
			if l["msg"] == "webhook attempt" {
				sent++
			}
		}
		t.Logf("server %d sent %d attempts", i+1, sent)
		if sent == 0 {
			t.Errorf("server %d sent nothing: the servers did not share the work", i+1)
		}
	}
}

// waitUntil polls cond with a generous deadline; the servers' errors
// say why when it times out.
func waitUntil(t *testing.T, what string, cond func() bool, servers ...*server) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for i, s := range servers {
				for _, l := range s.logLines(t) {
					if l["level"] == "ERROR" {
						t.Errorf("server %d: %v", i+1, l)
					}
				}
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
