package httpapi_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

const secret = "whsec_0123456789abcdef"

func TestSubscriptionsValidateAndNeverShowTheSecret(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000}, service.WithLoopbackReceivers())
	_, key := e.brand()
	for _, tc := range []struct {
		body     map[string]any
		mentions string
	}{
		{map[string]any{"events": []string{"conversion.created"}}, "url"},
		{map[string]any{"url": "ftp://example.com/", "events": []string{"conversion.created"}}, "url"},
		{map[string]any{"url": "http://example.com/hook", "events": []string{"conversion.created"}}, "url"},
		{map[string]any{"url": "https://example.com/hook"}, "events"},
		{map[string]any{"url": "https://example.com/hook", "events": []string{}}, "events"},
		{map[string]any{"url": "https://example.com/hook", "events": []string{"conversion.made"}}, "events[0]"},
		{map[string]any{"url": "https://example.com/hook", "events": []string{"cap.reached", "cap.reached"}}, "events[1]"},
		{map[string]any{"url": "https://example.com/hook", "events": []string{"cap.reached"}, "secret": "short"}, "secret"},
		{map[string]any{"url": "https://example.com/hook", "events": []string{"cap.reached"}, "colour": "red"}, "colour"},
		// Hosts that can never be a receiver: numeric forms of addresses,
		// metadata services.
		{map[string]any{"url": "https://2852039166/", "events": []string{"cap.reached"}}, "url"},
		{map[string]any{"url": "https://0xa9fea9fe/", "events": []string{"cap.reached"}}, "url"},
		{map[string]any{"url": "https://012.0.0.1/", "events": []string{"cap.reached"}}, "url"},
		{map[string]any{"url": "https://127.1/", "events": []string{"cap.reached"}}, "url"},
		{map[string]any{"url": "https://metadata.google.internal/computeMetadata/v1/", "events": []string{"cap.reached"}}, "url"},
	} {
		r := e.call("POST", "/api/public/webhooks", key, tc.body)
		if r.status != 422 || !strings.Contains(string(r.body), tc.mentions) {
			t.Errorf("%v: %d %s, want 422 naming %s", tc.body, r.status, r.body, tc.mentions)
		}
	}
	if got := e.listAll("/api/public/webhooks", key); len(got) != 0 {
		t.Fatalf("%d subscriptions after refused requests", len(got))
	}

	created := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{
		"url": "http://127.0.0.1:9/hook", "events": []string{"conversion.created", "partner.banned"}, "secret": secret}))
	id := created.field(t, "id")
	for _, r := range []response{created, e.call("GET", "/api/public/webhooks/"+id, key, nil), e.call("GET", "/api/public/webhooks", key, nil)} {
		if strings.Contains(string(r.body), secret) || !strings.Contains(string(r.body), `"hasSecret":true`) {
			t.Errorf("answer %s shows the secret or hides that there is one", r.body)
		}
	}
	e.must(202, e.call("POST", "/api/public/webhooks/"+id+"/test", key, nil))
	e.must(200, e.call("DELETE", "/api/public/webhooks/"+id, key, nil))
	e.must(404, e.call("GET", "/api/public/webhooks/"+id, key, nil))
	e.must(404, e.call("DELETE", "/api/public/webhooks/"+id, key, nil))

	var events struct{ Data []struct{ Name string } }
	e.must(200, e.call("GET", "/api/public/webhook-events", "", nil)).decode(t, &events)
	if len(events.Data) != 13 {
		t.Errorf("webhook-events lists %d events, want the 13 of DESIGN", len(events.Data))
	}
}

func TestBrandsNeverSeeEachOthersWebhooks(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000}, service.WithLoopbackReceivers())
		brandA, keyA := e.brand()
		_, keyB := e.brand()
		sub := e.must(201, e.call("POST", "/api/public/webhooks", keyA, map[string]any{
			"url": "http://127.0.0.1:9/hook", "events": []string{"partner.applied"}})).field(t, "id")
		e.activePartner(brandA, keyA) // partner.applied → one delivery
		ctx := context.Background()
		evts, _, err := e.svc.Events.Events(ctx, brandA, records.ListParams{})
		if err != nil {
			t.Fatal(err)
		}
		for _, evt := range evts {
			if _, err := e.svc.Webhooks.FanOut(ctx, evt.ID); err != nil {
				t.Fatal(err)
			}
		}
		deliveries := e.listAll("/api/v1/deliveries", keyA)
		if len(deliveries) != 1 {
			t.Fatalf("brand A has %d deliveries, want 1", len(deliveries))
		}
		for _, rq := range []struct{ method, path string }{
			{"GET", "/api/public/webhooks/" + sub},
			{"DELETE", "/api/public/webhooks/" + sub},
			{"POST", "/api/public/webhooks/" + sub + "/test"},
			{"GET", "/api/v1/deliveries/" + deliveries[0]},
			{"POST", "/api/v1/deliveries/" + deliveries[0] + "/retry"},
		} {
			if r := e.call(rq.method, rq.path, keyB, nil); r.status != 404 {
				t.Errorf("brand B: %s %s = %d %s, want 404", rq.method, rq.path, r.status, r.body)
			}
		}
		for _, path := range []string{"/api/public/webhooks", "/api/v1/deliveries", "/api/v1/deliveries?subscriptionId=" + sub} {
			if got := e.listAll(path, keyB); len(got) != 0 {
				t.Errorf("brand B lists %s: %v", path, got)
			}
		}
		// Retrying a delivery that has not failed is refused.
		if r := e.call("POST", "/api/v1/deliveries/"+deliveries[0]+"/retry", keyA, nil); r.status != 409 || r.errorCode() != "invalid_transition" {
			t.Errorf("retrying a pending delivery: %d %s", r.status, r.body)
		}
	})
}

func TestSubscriptionLimitHoldsUnderConcurrency(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 10_000}, service.WithLoopbackReceivers())
	_, key := e.brand()
	_, statuses := e.raceCalls(80, "POST", "/api/public/webhooks", key, func(int) any {
		return map[string]any{"url": "https://hooks.example.com/x", "events": []string{"cap.reached"}}
	})
	if statuses[201] != 50 || statuses[409] != 30 {
		t.Errorf("statuses = %v, want 50 201s and 30 409s", statuses)
	}
	subs := e.listAll("/api/public/webhooks", key)
	if len(subs) != 50 {
		t.Fatalf("%d subscriptions, want 50", len(subs))
	}
	e.must(200, e.call("DELETE", "/api/public/webhooks/"+subs[0], key, nil))
	e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": "https://hooks.example.com/y", "events": []string{"cap.reached"}}))
	e.must(409, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": "https://hooks.example.com/z", "events": []string{"cap.reached"}}))
}
