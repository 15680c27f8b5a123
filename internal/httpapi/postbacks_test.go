package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
	"github.com/tally-hq/tally/webhook"
)

// getReceiver is a partner's postback endpoint (or a webhook receiver) on
// loopback: it records every request and answers with the status answer
// gives for the n-th one.
type getReceiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	answer func(n int) int
	got    []*http.Request
	bodies [][]byte
}

func newGetReceiver(t *testing.T, answer func(n int) int) *getReceiver {
	r := &getReceiver{answer: answer}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, req)
		r.bodies = append(r.bodies, body)
		status := r.answer(len(r.got))
		r.mu.Unlock()
		w.WriteHeader(status)
		w.Write([]byte("ok from the partner"))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *getReceiver) requests() []*http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*http.Request(nil), r.got...)
}

// pipelineEnv is the API over real HTTP with the local delivery pipeline
// running on a clock the test moves.
type pipelineEnv struct {
	*env
	clock    *testenv.Clock
	pipeline *webhooks.Pipeline
}

func newPipelineEnv(t *testing.T, st store.Store, opts ...service.Option) *pipelineEnv {
	return newPipelineEnvLogging(t, st, nil, opts...)
}

// newPipelineEnvLogging is newPipelineEnv whose API logs to log (nil:
// nowhere).
func newPipelineEnvLogging(t *testing.T, st store.Store, log *slog.Logger, opts ...service.Option) *pipelineEnv {
	return newPipelineEnvAt(t, st, testenv.Start(), log, opts...)
}

// newPipelineEnvAt is newPipelineEnvLogging with the clock starting at start.
func newPipelineEnvAt(t *testing.T, st store.Store, start time.Time, log *slog.Logger, opts ...service.Option) *pipelineEnv {
	clock := testenv.NewClock(start)
	sender := delivery.NewSender(delivery.Options{AllowLoopback: true, Now: clock.Now, Timeout: 5 * time.Second})
	e := newEnv(t, st, httpapi.Config{RateLimit: 1_000_000, Logger: log}, append(opts, service.WithClock(clock.Now), service.WithLoopbackReceivers(),
		service.WithPipeline(sender, 8, slog.New(slog.DiscardHandler)))...)
	p := e.svc.Pipeline
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { p.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &pipelineEnv{env: e, clock: clock, pipeline: p}
}

// advance moves the clock and lets the pipeline see it.
func (e *pipelineEnv) advance(d time.Duration) {
	e.clock.Advance(d)
	e.pipeline.Wake()
}

// deliveries lists GET /api/v1/deliveries?query in full.
func (e *pipelineEnv) deliveries(key, query string) []tally.Delivery {
	e.t.Helper()
	var all []tally.Delivery
	cursor := ""
	for {
		q, _ := url.ParseQuery(query)
		q.Set("limit", "100")
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Data       []tally.Delivery
			NextCursor *string
		}
		e.must(200, e.call("GET", "/api/v1/deliveries?"+q.Encode(), key, nil)).decode(e.t, &page)
		all = append(all, page.Data...)
		if page.NextCursor == nil {
			return all
		}
		cursor = *page.NextCursor
	}
}

// waitFor polls the delivery log (query) until cond holds.
func (e *pipelineEnv) waitFor(key, query, what string, cond func([]tally.Delivery) bool) []tally.Delivery {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ds := e.deliveries(key, query)
		if cond(ds) {
			return ds
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("timed out waiting for %s; deliveries: %+v", what, ds)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func attemptsMade(n int) func([]tally.Delivery) bool {
	return func(ds []tally.Delivery) bool {
		for _, d := range ds {
			if len(d.Attempts) < n {
				return false
			}
		}
		return len(ds) > 0
	}
}

// everyMacro is a postback URL template with every macro.
const everyMacro = "/pb?click={click_id}&cnv={conversion_id}&off={offer_id}&prt={partner_id}&pay={payout}&cents={payout_cents}" +
	"&cur={currency}&st={status}&ev={event}&s1={sub1}&s2={sub2}&s3={sub3}&s4={sub4}&s5={sub5}"

func TestPostbacksFillMacrosRetryAndShowInTheLog(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, map[string]any{"revenueCents": 98765, "payoutCents": 4321, "currency": "EUR"})
		hooks := newGetReceiver(t, func(int) int { return 200 })
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": hooks.srv.URL, "events": []string{"conversion.created"}}))
		pb := newGetReceiver(t, func(n int) int { return map[bool]int{true: 503, false: 204}[n <= 2] })

		// Bad templates change nothing.
		path := "/api/v1/partners/" + partner + "/postback"
		for _, body := range []map[string]any{
			{"url": pb.srv.URL + "/pb?rev={revenue}"},
			{"url": pb.srv.URL + "/pb?amount={revenue_cents}"},
			{"url": pb.srv.URL + "/pb?c={click_id"},
			{"url": "http://{sub1}.example.com/pb"},
			{"url": "ftp://partner.example/pb"},
			{"url": pb.srv.URL + "/pb", "events": []string{"partner.banned"}},
			{"url": pb.srv.URL + "/pb", "events": []string{}},
			{"events": []string{"conversion.created"}},
		} {
			if r := e.call("PUT", path, key, body); r.status != 422 || r.errorCode() != "validation_error" {
				t.Errorf("PUT %v: %d %s, want 422", body, r.status, r.body)
			}
		}
		e.must(404, e.call("GET", path, key, nil))
		_, otherKey := e.brand()
		e.must(404, e.call("PUT", path, otherKey, map[string]any{"url": pb.srv.URL + "/pb"}))

		var got tally.Postback
		e.must(200, e.call("PUT", path, key, map[string]any{"url": pb.srv.URL + everyMacro,
			"events": []string{"conversion.created", "conversion.approved"}})).decode(t, &got)
		if got.PartnerID != partner || got.Status != tally.EndpointEnabled || len(got.Events) != 2 {
			t.Fatalf("PUT answered %+v", got)
		}
		e.must(404, e.call("GET", path, otherKey, nil))

		subs := map[string]any{"sub1": "a b&c=d/é?#", "sub2": "x+y", "sub3": "100%", "sub4": "", "sub5": "{sub1}"}
		body := map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": "t-1"}
		for k, v := range subs {
			body[k] = v
		}
		conversion := e.must(201, e.call("POST", "/api/v1/conversions", key, body)).field(t, "id")

		// Attempt 1 at once, then the retries on the schedule.
		e.waitFor(key, "type=postback", "attempt 1", attemptsMade(1))
		e.advance(time.Second - time.Millisecond)
		time.Sleep(50 * time.Millisecond)
		if n := len(pb.requests()); n != 1 {
			t.Fatalf("%d requests before the first retry was due, want 1", n)
		}
		e.advance(time.Millisecond)
		e.waitFor(key, "type=postback", "attempt 2", attemptsMade(2))
		e.advance(5 * time.Second)
		ds := e.waitFor(key, "type=postback", "success", func(ds []tally.Delivery) bool {
			return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded
		})
		d := ds[0]
		reqs := pb.requests()
		if len(reqs) != 3 || len(d.Attempts) != 3 {
			t.Fatalf("%d requests, %d attempts; want 3 of each", len(reqs), len(d.Attempts))
		}
		for i, a := range d.Attempts {
			want := map[bool]int{true: 503, false: 204}[i < 2]
			if a.StatusCode != want || a.Response != "ok from the partner" && want != 204 {
				t.Errorf("attempt %d: %+v, want %d", i+1, a, want)
			}
		}
		if gap := d.Attempts[1].At.Sub(d.Attempts[0].At.Time); gap != time.Second {
			t.Errorf("first retry %v after attempt 1, want 1s", gap)
		}
		if gap := d.Attempts[2].At.Sub(d.Attempts[1].At.Time); gap != 5*time.Second {
			t.Errorf("second retry %v after attempt 2, want 5s", gap)
		}
		want := url.Values{"click": {""}, "cnv": {conversion}, "off": {offer}, "prt": {partner}, "pay": {"43.21"}, "cents": {"4321"},
			"cur": {"EUR"}, "st": {"approved"}, "ev": {"conversion.created"}}
		for i := 1; i <= 5; i++ {
			k := "sub" + string(rune('0'+i))
			want.Set("s"+k[3:], subs[k].(string))
		}
		for i, r := range reqs {
			if r.Method != http.MethodGet || r.URL.Path != "/pb" || len(pb.bodies[i]) != 0 {
				t.Errorf("request %d: %s %s with %d body bytes; want a GET of /pb", i+1, r.Method, r.URL.Path, len(pb.bodies[i]))
			}
			if got := r.URL.Query(); got.Encode() != want.Encode() {
				t.Errorf("request %d: query\n%s\nwant\n%s", i+1, got.Encode(), want.Encode())
			}
			if strings.Contains(r.URL.RawQuery, "98765") || strings.Contains(r.URL.RawQuery, "987.65") {
				t.Errorf("request %d leaks the revenue: %s", i+1, r.URL.RawQuery)
			}
			if r.Header.Get(webhook.WebhookIDHeader) != d.ID || r.Header.Get(webhook.SignatureHeader) != "" {
				t.Errorf("request %d headers: %v", i+1, r.Header)
			}
		}
		if d.Type != tally.DeliveryPostback || d.PartnerID != partner || d.SubscriptionID != "" || d.Event != "conversion.created" ||
			d.URL != pb.srv.URL+"/pb?"+reqs[0].URL.RawQuery {
			t.Errorf("the log shows %+v", d)
		}

		// The log by type, endpoint and event.
		e.waitFor(key, "type=webhook", "the webhook", func(ds []tally.Delivery) bool { return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded })
		for q, n := range map[string]int{
			"type=postback": 1, "type=webhook": 1, "": 2, "partnerId=" + partner: 1, "type=webhook&partnerId=" + partner: 0,
			"event=conversion.created": 2, "event=conversion.approved": 0, "type=postback&status=succeeded": 1,
			"status=failed": 0, "type=postback&event=conversion.created&status=succeeded&partnerId=" + partner: 1,
			"eventId=" + d.EventID: 2, "type=postback&from=" + e.clock.Now().AddDate(0, 0, 1).Format(time.DateOnly): 0,
			"type=postback&to=" + e.clock.Now().Format(time.DateOnly): 1,
		} {
			got := e.deliveries(key, q)
			if len(got) != n {
				t.Errorf("GET /deliveries?%s lists %d, want %d", q, len(got), n)
			}
			for _, d := range got {
				if strings.Contains(q, "type=postback") && d.Type != "postback" || strings.Contains(q, "type=webhook") && d.Type != "webhook" {
					t.Errorf("GET /deliveries?%s lists a %s", q, d.Type)
				}
			}
		}
		for _, q := range []string{"partnerId=sub_x", "event=order.paid", "subscriptionId=sub_01kb7k3m5n6p7q8r9s0t1v2w3x&partnerId=" + partner} {
			if r := e.call("GET", "/api/v1/deliveries?"+q, key, nil); r.status != 422 {
				t.Errorf("GET /deliveries?%s: %d %s, want 422", q, r.status, r.body)
			}
		}
		if got := e.deliveries(otherKey, "partnerId="+partner); len(got) != 0 {
			t.Errorf("another brand sees %d of the partner's postbacks", len(got))
		}

		// A pending conversion fires it when created and again when
		// approved (events it names), not when rejected (one it does not).
		e.must(200, e.call("PUT", path, key, map[string]any{"url": pb.srv.URL + "/pb?ev={event}&st={status}&cnv={conversion_id}&pay={payout}",
			"events": []string{"conversion.created", "conversion.approved"}}))
		manual := e.offer(key, map[string]any{"approval": "manual", "payoutCents": 700, "currency": "JPY"})
		approved := e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": manual, "partnerId": partner, "externalTxnId": "m-1"})).field(t, "id")
		rejected := e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": manual, "partnerId": partner, "externalTxnId": "m-2"})).field(t, "id")
		e.must(200, e.call("POST", "/api/v1/conversions/"+approved+"/approve", key, nil))
		e.must(200, e.call("POST", "/api/v1/conversions/"+rejected+"/reject", key, nil))
		e.waitFor(key, "type=postback&status=succeeded", "the pending conversions' postbacks", func(ds []tally.Delivery) bool { return len(ds) == 4 })
		gotURLs := map[string]bool{}
		for _, r := range pb.requests()[3:] {
			gotURLs[r.URL.RawQuery] = true
		}
		for _, q := range []string{"ev=conversion.created&st=pending&cnv=" + approved + "&pay=700", "ev=conversion.created&st=pending&cnv=" + rejected + "&pay=700",
			"ev=conversion.approved&st=approved&cnv=" + approved + "&pay=700"} {
			if !gotURLs[q] {
				t.Errorf("no postback ?%s; got %v", q, gotURLs)
			}
		}
		if len(gotURLs) != 3 {
			t.Errorf("postbacks %v, want the 3 above and none for the rejection", gotURLs)
		}

		// A test is logged like any delivery, with sample values.
		e.must(202, e.call("POST", path+"/test", key, nil))
		test := e.waitFor(key, "type=postback&event=postback.test", "the test postback", func(ds []tally.Delivery) bool {
			return len(ds) == 1 && ds[0].Status == tally.DeliverySucceeded
		})[0]
		if last := pb.requests()[len(pb.requests())-1]; last.URL.RawQuery != "ev=postback.test&st=approved&cnv=cnv_test&pay=1.23" || test.URL != pb.srv.URL+"/pb?"+last.URL.RawQuery {
			t.Errorf("the test postback: %s, logged as %s", last.URL, test.URL)
		}
		e.must(404, e.call("POST", path+"/test", otherKey, nil))

		// Deleted, it gets nothing more.
		e.must(200, e.call("DELETE", path, key, nil))
		e.must(404, e.call("GET", path, key, nil))
		e.must(404, e.call("POST", path+"/test", key, nil))
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": "t-2"}))
		e.waitFor(key, "type=webhook", "the last webhook", func(ds []tally.Delivery) bool { return len(ds) == 4 })
		if got := e.deliveries(key, "type=postback"); len(got) != 5 {
			t.Errorf("%d postbacks after the postback was deleted, want the 5 from before", len(got))
		}
	})
}

// TestEndpointsDisableEnableAndRecover: a subscription and a postback whose
// receivers fail are disabled at the threshold, exactly once; enabled again
// and recovered, their failed deliveries go out again under the same ids.
func TestEndpointsDisableEnableAndRecover(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		const threshold = 3
		e := newPipelineEnv(t, st, service.WithEndpointHealth(threshold, 0))
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		var up sync.Mutex
		healthy := false
		answer := func(int) int {
			up.Lock()
			defer up.Unlock()
			return map[bool]int{true: 200, false: 500}[healthy]
		}
		hooks, pbs := newGetReceiver(t, answer), newGetReceiver(t, answer)
		sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": hooks.srv.URL, "events": []string{"conversion.created"}, "secret": secret})).field(t, "id")
		pbPath := "/api/v1/partners/" + partner + "/postback"
		e.must(200, e.call("PUT", pbPath, key, map[string]any{"url": pbs.srv.URL + "/pb?c={conversion_id}"}))
		since := e.clock.Now()

		health := func(path string) tally.EndpointHealth {
			var v struct{ tally.EndpointHealth }
			e.must(200, e.call("GET", path, key, nil)).decode(t, &v)
			return v.EndpointHealth
		}
		convert := func(txn string) {
			e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": txn}))
		}
		paths := []string{"/api/public/webhooks/" + sub, pbPath}
		for i := range threshold {
			convert("fail-" + string(rune('a'+i)))
			e.waitFor(key, "", "attempt 1", func(ds []tally.Delivery) bool { return len(ds) == 2*(i+1) && attemptsMade(1)(ds) })
		}
		// Failed attempts that are retried count for nothing: the endpoints
		// stay enabled until their deliveries have failed every attempt.
		for i, wait := range webhooks.RetrySchedule {
			for _, path := range paths {
				if h := health(path); h.Status != tally.EndpointEnabled || h.ConsecutiveFailures != 0 {
					t.Fatalf("%s after attempt %d of %d deliveries: %+v, want enabled, no failed delivery", path, i+1, threshold, h)
				}
			}
			e.advance(wait)
			e.waitFor(key, "", "the retries", attemptsMade(i+2))
		}
		ds := e.waitFor(key, "status=failed", "every delivery to fail", func(ds []tally.Delivery) bool { return len(ds) == 2*threshold })
		for _, path := range paths {
			h := health(path)
			if h.Status != tally.EndpointDisabled || h.DisabledReason != tally.DisabledConsecutiveFailures || h.ConsecutiveFailures != threshold || h.DisabledAt == nil {
				t.Fatalf("%s after %d deliveries failed every attempt: %+v", path, threshold, h)
			}
		}
		// Disabled: no new deliveries.
		convert("while-disabled")
		e.advance(time.Second)
		time.Sleep(200 * time.Millisecond) // time for a fan-out that would be wrong
		if all := e.deliveries(key, ""); len(all) != 2*threshold {
			t.Errorf("%d deliveries, want %d: none for the conversion made while disabled", len(all), 2*threshold)
		}
		// Recovering a disabled endpoint is refused; enable, then recover.
		recoverBody := map[string]any{"since": since.Format(time.RFC3339Nano)}
		for _, path := range paths {
			if r := e.call("POST", path+"/recover", key, recoverBody); r.status != 409 || r.errorCode() != "invalid_transition" {
				t.Errorf("recover while disabled: %d %s", r.status, r.body)
			}
			for _, bad := range []any{map[string]any{}, map[string]any{"since": "yesterday"}, map[string]any{"since": "2999-01-01T00:00:00Z"}} {
				if r := e.call("POST", path+"/recover", key, bad); r.status != 422 {
					t.Errorf("recover %v: %d %s", bad, r.status, r.body)
				}
			}
			e.must(404, e.call("POST", path+"/enable", otherBrandKey(e), nil))
			var v struct{ tally.EndpointHealth }
			e.must(200, e.call("POST", path+"/enable", key, nil)).decode(t, &v)
			if v.Status != tally.EndpointEnabled || v.ConsecutiveFailures != 0 || v.DisabledReason != "" {
				t.Errorf("%s enabled: %+v", path, v.EndpointHealth)
			}
		}
		up.Lock()
		healthy = true
		up.Unlock()
		before, eventOf := map[string]int{}, map[string]string{}
		for _, d := range ds {
			before[d.ID], eventOf[d.ID] = len(d.Attempts), d.EventID
		}
		for _, path := range []string{"/api/public/webhooks/" + sub, pbPath} {
			var rec endpoints.Recovery
			e.must(200, e.call("POST", path+"/recover", key, recoverBody)).decode(t, &rec)
			if rec.Recovered != threshold || rec.More {
				t.Errorf("%s/recover: %+v, want %d recovered", path, rec, threshold)
			}
		}
		after := e.waitFor(key, "status=succeeded", "the recovered deliveries", func(ds []tally.Delivery) bool { return len(ds) == 2*threshold })
		for _, d := range after {
			if n, ok := before[d.ID]; !ok || len(d.Attempts) != n+1 || d.Attempts[n].StatusCode != 200 {
				t.Errorf("recovered delivery %s: %d attempts (had %d, known %v)", d.ID, len(d.Attempts), n, ok)
			}
		}
		// Same ids on the wire: the webhook id and the envelope's event id.
		hooks.mu.Lock()
		for i := len(hooks.got) - threshold; i < len(hooks.got); i++ {
			id := hooks.got[i].Header.Get(webhook.WebhookIDHeader)
			var env tally.Event
			if err := json.Unmarshal(hooks.bodies[i], &env); err != nil || eventOf[id] == "" || env.ID != eventOf[id] {
				t.Errorf("a recovered webhook came as %s with event %q (%v); want a known delivery and its event %q", id, env.ID, err, eventOf[id])
			}
		}
		hooks.mu.Unlock()
		for _, path := range paths {
			if h := health(path); h.Status != tally.EndpointEnabled || h.ConsecutiveFailures != 0 || h.LastSuccessAt == nil {
				t.Errorf("%s after recovery: %+v", path, h)
			}
		}
		// Nothing failed is left: recovering again queues nothing.
		var rec endpoints.Recovery
		e.must(200, e.call("POST", "/api/public/webhooks/"+sub+"/recover", key, recoverBody)).decode(t, &rec)
		if rec.Recovered != 0 {
			t.Errorf("a second recover queued %d", rec.Recovered)
		}
	})
}

func otherBrandKey(e *pipelineEnv) string {
	_, key := e.brand()
	return key
}

// TestSecretRotationSignsWithBothSecretsForADay: after PATCH with a new
// secret, deliveries carry a v1 for each secret, so a receiver holding
// either accepts them; 24 hours on, only the new one signs.
func TestSecretRotationSignsWithBothSecretsForADay(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st)
		_, key := e.brand()
		rcv := newGetReceiver(t, func(int) int { return 200 })
		sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": rcv.srv.URL, "events": []string{"cap.reached"}, "secret": secret})).field(t, "id")
		path := "/api/public/webhooks/" + sub
		for _, body := range []any{map[string]any{"secret": nil}, map[string]any{"secret": "short"}, map[string]any{"events": []string{}}, map[string]any{"url": "http://example.com/x"}} {
			if r := e.call("PATCH", path, key, body); r.status != 422 {
				t.Errorf("PATCH %v: %d %s", body, r.status, r.body)
			}
		}
		const newSecret = "whsec_the_new_one_0123"
		var got tally.Subscription
		e.must(200, e.call("PATCH", path, key, map[string]any{"secret": newSecret, "events": []string{"cap.reached", "partner.banned"}})).decode(t, &got)
		if got.PreviousSecretExpiresAt == nil || !got.PreviousSecretExpiresAt.Equal(e.clock.Now().Add(24*time.Hour)) || len(got.Events) != 2 || got.URL != rcv.srv.URL {
			t.Fatalf("PATCH answered %+v", got)
		}
		_, otherKey := e.brand()
		e.must(404, e.call("PATCH", path, otherKey, map[string]any{"secret": newSecret}))

		send := func() (header string, body []byte) {
			t.Helper()
			n := len(rcv.requests())
			e.must(202, e.call("POST", path+"/test", key, nil))
			deadline := time.Now().Add(10 * time.Second)
			for len(rcv.requests()) == n {
				if time.Now().After(deadline) {
					t.Fatal("the test event never came")
				}
				time.Sleep(5 * time.Millisecond)
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			return rcv.got[n].Header.Get(webhook.SignatureHeader), rcv.bodies[n]
		}
		// webhook.Verify checks the timestamp against the wall clock; the
		// deliveries are signed on the test's clock, so it is checked with
		// a tolerance that covers the difference.
		tolerance := max(time.Since(e.clock.Now()), time.Until(e.clock.Now())) + 72*time.Hour
		header, body := send()
		if n := strings.Count(header, "v1="); n != 2 {
			t.Errorf("during the rotation: %q, want two v1 values", header)
		}
		for _, s := range []string{secret, newSecret} {
			if err := webhook.Verify(s, header, body, tolerance); err != nil {
				t.Errorf("during the rotation, a receiver with %q: %v", s, err)
			}
		}
		e.clock.Advance(24 * time.Hour)
		header, body = send()
		if err := webhook.Verify(newSecret, header, body, tolerance); err != nil || strings.Count(header, "v1=") != 1 {
			t.Errorf("after the rotation: %q: %v", header, err)
		}
		if err := webhook.Verify(secret, header, body, tolerance); err == nil {
			t.Errorf("after the rotation the old secret still verifies %q", header)
		}
	})
}
