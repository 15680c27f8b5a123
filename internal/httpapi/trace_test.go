package httpapi_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// A caller's trace (the W3C specification's example).
const (
	callerTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpanID  = "00f067aa0ba902b7"
	callerParent  = "00-" + callerTraceID + "-" + callerSpanID + "-01"
)

var traceparentSyntax = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$`)

// spanOf splits a traceparent a delivery carried into its trace id, span
// id and flags, failing unless it is a valid version 00 value.
func spanOf(t *testing.T, header string) (traceID, spanID, flags string) {
	t.Helper()
	m := traceparentSyntax.FindStringSubmatch(header)
	if m == nil || m[1] == strings.Repeat("0", 32) || m[2] == strings.Repeat("0", 16) {
		t.Fatalf("traceparent %q is not a valid version 00 value", header)
	}
	return m[1], m[2], m[3]
}

// tracedCall sends a JSON request with the traceparent header values given.
func (e *env) tracedCall(method, path, key string, body any, traceparents ...string) response {
	e.t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		e.t.Fatal(err)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, bytes.NewReader(raw))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	for _, v := range traceparents {
		req.Header.Add("traceparent", v)
	}
	r, err := e.send(req)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// requestLine finds the log line of the request whose X-Request-Id is id.
func requestLine(t *testing.T, logs *testenv.SyncBuffer, id string) map[string]any {
	t.Helper()
	for line := range strings.Lines(logs.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if m["msg"] == "request" && m["requestId"] == id {
			return m
		}
	}
	t.Fatalf("no request log line with requestId %s in:\n%s", id, logs.String())
	return nil
}

// A conversion posted with a traceparent is logged with its trace id, and
// every delivery it causes (its webhook, each retry of it, the cap it
// reaches, the partner's postback) carries a traceparent of that trace,
// whose parent is a span of Tally's own: not the caller's, not the
// request's, a new one per attempt.
func TestTraceparentReachesEveryDeliveryOfTheRequest(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		logs := &testenv.SyncBuffer{}
		e := newPipelineEnvLogging(t, st, slog.New(slog.NewJSONHandler(logs, nil)))
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, map[string]any{"caps": map[string]any{"daily": 1}})
		created := newGetReceiver(t, func(n int) int { return map[bool]int{true: 500, false: 200}[n == 1] })
		capped := newGetReceiver(t, func(int) int { return 200 })
		postback := newGetReceiver(t, func(int) int { return 204 })
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": created.srv.URL, "events": []string{"conversion.created"}}))
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": capped.srv.URL, "events": []string{"cap.reached"}}))
		e.must(200, e.call("PUT", "/api/v1/partners/"+partner+"/postback", key, map[string]any{"url": postback.srv.URL + "/pb?c={conversion_id}"}))

		r := e.must(201, e.tracedCall("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner}, callerParent))
		line := requestLine(t, logs, r.header.Get("X-Request-Id"))
		requestSpan, _ := line["spanId"].(string)
		if line["traceId"] != callerTraceID || !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(requestSpan) || requestSpan == callerSpanID {
			t.Errorf("the request's log line has traceId %v, spanId %v; want the caller's trace and a span of the request's own", line["traceId"], line["spanId"])
		}

		e.waitFor(key, "", "attempt 1 of every delivery", func(ds []tally.Delivery) bool { return len(ds) == 3 && attemptsMade(1)(ds) })
		e.advance(time.Second)
		e.waitFor(key, "", "every delivery to succeed", func(ds []tally.Delivery) bool {
			for _, d := range ds {
				if d.Status != tally.DeliverySucceeded {
					return false
				}
			}
			return len(ds) == 3
		})

		spans := map[string]string{callerSpanID: "the caller", requestSpan: "the request"}
		for name, rcv := range map[string]*getReceiver{"conversion.created": created, "cap.reached": capped, "postback": postback} {
			reqs := rcv.requests()
			if want := map[bool]int{true: 2, false: 1}[rcv == created]; len(reqs) != want {
				t.Fatalf("%s: %d requests, want %d", name, len(reqs), want)
			}
			for i, req := range reqs {
				traceID, spanID, flags := spanOf(t, req.Header.Get("traceparent"))
				if traceID != callerTraceID || flags != "01" {
					t.Errorf("%s request %d: traceparent %s, want trace %s, flags 01", name, i+1, req.Header.Get("traceparent"), callerTraceID)
				}
				if whose, seen := spans[spanID]; seen {
					t.Errorf("%s request %d: parent id %s is %s's, want one of the attempt's own", name, i+1, spanID, whose)
				}
				spans[spanID] = name
			}
		}
	})
}

// A request without a valid traceparent starts a trace of its own: the log
// line names it, and the deliveries its events cause carry it. An event
// written outside any request (as every event was before traces were
// kept) is delivered without traceparent.
func TestRequestWithoutTraceparentStartsATrace(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		logs := &testenv.SyncBuffer{}
		e := newPipelineEnvLogging(t, st, slog.New(slog.NewJSONHandler(logs, nil)))
		brandID, key := e.brand()
		offer := e.offer(key, nil)
		partner := e.activePartner(brandID, key)
		hooks := newGetReceiver(t, func(int) int { return 200 })
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": hooks.srv.URL, "events": []string{"conversion.created", "partner.applied"}}))

		cases := []struct {
			name         string
			traceparents []string
		}{
			{"none", nil},
			{"empty", []string{""}},
			{"uppercase", []string{strings.ToUpper(callerParent)}},
			{"trace id all zeros", []string{"00-" + strings.Repeat("0", 32) + "-" + callerSpanID + "-01"}},
			{"parent id all zeros", []string{"00-" + callerTraceID + "-" + strings.Repeat("0", 16) + "-01"}},
			{"version ff", []string{"ff-" + callerTraceID + "-" + callerSpanID + "-01"}},
			{"version 00 with more", []string{callerParent + "-00"}},
			{"short", []string{callerParent[:54]}},
			{"two headers", []string{callerParent, callerParent}},
		}
		traceOf := map[string]string{} // conversion id → the trace its request's log line names
		for _, tc := range cases {
			r := e.must(201, e.tracedCall("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner}, tc.traceparents...))
			line := requestLine(t, logs, r.header.Get("X-Request-Id"))
			traceID, _ := line["traceId"].(string)
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(traceID) || traceID == strings.Repeat("0", 32) || traceID == callerTraceID {
				t.Errorf("%s: the log line's traceId is %v, want a new trace", tc.name, line["traceId"])
			}
			traceOf[r.field(t, "id")] = traceID
		}
		// Continued from a later version, whose extra fields are not ours to read.
		r := e.must(201, e.tracedCall("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner},
			"cc-"+callerTraceID+"-"+callerSpanID+"-01-what-comes-later"))
		traceOf[r.field(t, "id")] = callerTraceID

		// An event no request made: the partner applies through the service.
		name, email := "Quiet Partner", "quiet@partner.example"
		if _, err := e.svc.Partners.Apply(t.Context(), brandID, partners.ApplicationInput{Name: &name, Email: &email}); err != nil {
			t.Fatal(err)
		}

		e.waitFor(key, "", "every delivery to succeed", func(ds []tally.Delivery) bool {
			for _, d := range ds {
				if d.Status != tally.DeliverySucceeded {
					return false
				}
			}
			return len(ds) == len(traceOf)+1
		})
		for i, req := range hooks.requests() {
			if req.Header.Get("X-Tally-Event") == tally.EventPartnerApplied {
				if v, ok := req.Header["Traceparent"]; ok {
					t.Errorf("partner.applied, made outside a request, came with traceparent %q", v)
				}
				continue
			}
			var evt struct {
				Data struct{ ConversionID string }
			}
			if err := json.Unmarshal(hooks.body(i), &evt); err != nil {
				t.Fatal(err)
			}
			traceID, _, _ := spanOf(t, req.Header.Get("traceparent"))
			if want := traceOf[evt.Data.ConversionID]; traceID != want {
				t.Errorf("the webhook of %s carries trace %s, want %s, its request's", evt.Data.ConversionID, traceID, want)
			}
		}
	})
}

// body is the body of request i.
func (r *getReceiver) body(i int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[i]
}
