package cli_test

// End-to-end test of the local server's durable webhook pipeline: the real
// binary, loopback receivers, and a kill -9 in the middle of the retry
// schedule.

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tally-hq/tally/webhook"
)

// The retry schedule of the spec (section 6): attempt 1 at once, then these
// waits before retries 1 to 6; a delivery whose seventh attempt fails is
// failed. Written out here rather than taken from webhooks.RetrySchedule, so
// that the test checks the spec, not the code against itself.
var specRetryWaits = []time.Duration{time.Second, 5 * time.Second, 30 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour}

const specMaxAttempts = 7

// killTestRetryScale makes the whole schedule take about 4.7 s:
// 0.5 ms, 2.5 ms, 15 ms, 150 ms, 900 ms and 3.6 s.
const killTestRetryScale = 0.0005

func scaledWait(retry int) time.Duration { // retry: 1..6
	return time.Duration(float64(specRetryWaits[retry-1]) * killTestRetryScale)
}

// ---------------------------------------------------------------------------
// A loopback webhook receiver that keeps every request it got.

type hookRequest struct {
	n         int // 1-based number of this request among those of its webhook id
	webhookID string
	event     string // X-Tally-Event
	signature string
	body      []byte
	arrived   time.Time
	held      bool // held until the kill: never answered
	status    int  // what the receiver answered (0 when held)

	envelope struct {
		ID        string `json:"id"`
		Event     string `json:"event"`
		CreatedAt time.Time
		BrandID   string `json:"brandId"`
		Data      struct {
			ConversionID  string `json:"conversionId"`
			ExternalTxnID string `json:"externalTxnId"`
		} `json:"data"`
	}
	decodeErr error
}

type hookReceiver struct {
	name   string
	secret string
	answer func(n int) int // the status for the n-th request of a webhook id
	// hold, when set, says whether a request is to be held unanswered
	// until release is closed (so that it is in flight when the server is
	// killed, or while another server starts).
	hold    func(r *hookRequest) bool
	release chan struct{}
	srv     *httptest.Server

	mu   sync.Mutex
	byID map[string][]*hookRequest
	all  []*hookRequest
	held int
}

func newHookReceiver(t *testing.T, name, secret string, release chan struct{}, answer func(n int) int) *hookReceiver {
	rcv := &hookReceiver{name: name, secret: secret, answer: answer, release: release, byID: map[string][]*hookRequest{}}
	rcv.srv = httptest.NewServer(http.HandlerFunc(rcv.serveHTTP))
	t.Cleanup(rcv.srv.Close)
	return rcv
}

func (rcv *hookReceiver) url() string { return rcv.srv.URL + "/hooks/" + rcv.name }

func released(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func (rcv *hookReceiver) serveHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	req := &hookRequest{
		webhookID: r.Header.Get(webhook.WebhookIDHeader),
		event:     r.Header.Get(webhook.EventHeader),
		signature: r.Header.Get(webhook.SignatureHeader),
		body:      body,
		arrived:   time.Now(),
	}
	req.decodeErr = json.Unmarshal(body, &req.envelope)
	rcv.mu.Lock()
	req.n = len(rcv.byID[req.webhookID]) + 1
	rcv.byID[req.webhookID] = append(rcv.byID[req.webhookID], req)
	rcv.all = append(rcv.all, req)
	req.held = rcv.hold != nil && !released(rcv.release) && rcv.hold(req)
	if req.held {
		rcv.held++
	} else {
		req.status = rcv.answer(req.n)
	}
	status := req.status
	rcv.mu.Unlock()
	if req.held {
		select {
		case <-rcv.release:
		case <-time.After(30 * time.Second):
		}
		// Answered as any other (when the server that sent it was killed
		// meanwhile, nobody reads it).
		rcv.mu.Lock()
		req.status = rcv.answer(req.n)
		status = req.status
		rcv.mu.Unlock()
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"request":%d}`, req.n)
}

// snapshot returns a copy of the requests per webhook id.
func (rcv *hookReceiver) snapshot() map[string][]hookRequest {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	out := make(map[string][]hookRequest, len(rcv.byID))
	for id, reqs := range rcv.byID {
		for _, r := range reqs {
			out[id] = append(out[id], *r)
		}
	}
	return out
}

func (rcv *hookReceiver) counts() (requests, held int) {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	return len(rcv.all), rcv.held
}

// seenFor counts the requests whose envelope's externalTxnId starts with
// prefix, per webhook id.
func (rcv *hookReceiver) seenFor(prefix string) map[string]int {
	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	out := map[string]int{}
	for _, r := range rcv.all {
		if strings.HasPrefix(r.envelope.Data.ExternalTxnID, prefix) {
			out[r.webhookID]++
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// The delivery log as the API shows it.

type attemptView struct {
	At         time.Time `json:"at"`
	StatusCode int       `json:"statusCode"`
	Error      string    `json:"error"`
	LatencyMs  int64     `json:"latencyMs"`
	Response   string    `json:"response"`
}

type deliveryView struct {
	ID             string        `json:"id"`
	BrandID        string        `json:"brandId"`
	Type           string        `json:"type"`
	EventID        string        `json:"eventId"`
	Event          string        `json:"event"`
	SubscriptionID string        `json:"subscriptionId"`
	PartnerID      string        `json:"partnerId"`
	URL            string        `json:"url"`
	Status         string        `json:"status"`
	Attempts       []attemptView `json:"attempts"`
	NextAttemptAt  *time.Time    `json:"nextAttemptAt"`
	CreatedAt      time.Time     `json:"createdAt"`
}

// listDeliveries reads every page of GET /api/v1/deliveries?query.
func (s *server) listDeliveries(t *testing.T, key string, query url.Values) []deliveryView {
	t.Helper()
	var all []deliveryView
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	q.Set("limit", "100")
	for page := 0; ; page++ {
		if page > 100 {
			t.Fatalf("GET /api/v1/deliveries: more than 100 pages")
		}
		r := s.call(t, "GET", "/api/v1/deliveries?"+q.Encode(), key, nil).expect(t, "GET /api/v1/deliveries", 200)
		var body struct {
			Data       []deliveryView `json:"data"`
			NextCursor *string        `json:"nextCursor"`
		}
		if err := json.Unmarshal(r.body, &body); err != nil {
			t.Fatalf("GET /api/v1/deliveries: %v: %s", err, r.body)
		}
		all = append(all, body.Data...)
		if body.NextCursor == nil {
			return all
		}
		q.Set("cursor", *body.NextCursor)
	}
}

// ---------------------------------------------------------------------------

// TestWebhooksSurviveKill9 runs a whole (scaled) retry schedule across a
// kill -9 of the server: nothing is lost, every delivery is decided, each
// is attempted at least once per recorded attempt and at most once more
// (an attempt in flight at the kill), and the waits between recorded
// attempts follow the schedule.
//
// It is deliberately not parallel: it checks timings of a few
// milliseconds, and the other end-to-end tests (a load test among them)
// run only after it.
func TestWebhooksSurviveKill9(t *testing.T) {
	start := time.Now()
	environ := env(
		fmt.Sprintf("TALLY_WEBHOOK_RETRY_SCALE=%g", killTestRetryScale),
		"TALLY_RATE_LIMIT=1000000",
	)
	data := t.TempDir()
	brandID, _, key := setupBrand(t, environ, data, "Acme")

	// Closed once the first server is dead: held requests return then.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }

	failing := newHookReceiver(t, "failing", "failing-secret-0123456789", release, func(int) int { return 500 })
	recovering := newHookReceiver(t, "recovering", "recovering-secret-0123456789", release, func(n int) int {
		if n <= 2 {
			return 500
		}
		return 200
	})
	// The first request of each delivery of wave 2 is held until the kill,
	// so that the kill certainly cuts attempts in flight.
	holdWave2 := func(r *hookRequest) bool { return r.n == 1 && strings.HasPrefix(r.envelope.Data.ExternalTxnID, "w2-") }
	failing.hold, recovering.hold = holdWave2, holdWave2
	receivers := []*hookReceiver{failing, recovering}
	// Cleanups run last first: this one before the receivers' Close, which
	// waits for their handlers (should the test end before the kill).
	t.Cleanup(releaseHeld)

	s := serve(t, environ, "--data", data)
	offerID := str(s.call(t, "POST", "/api/v1/offers", key, offerInput("Hooks")).expect(t, "POST /api/v1/offers", 201).object(t), "id")
	partnerID := str(s.call(t, "POST", "/api/public/brands/"+brandID+"/applications", "",
		map[string]any{"name": "Pat Partner", "email": "pat@example.com"}).expect(t, "apply as a partner", 201).object(t), "id")
	s.call(t, "POST", "/api/v1/partners/"+partnerID+"/approve", key, nil).expect(t, "approve the partner", 200)

	subOf := map[string]*hookReceiver{} // subscription id → receiver
	for _, rcv := range receivers {
		sub := s.call(t, "POST", "/api/public/webhooks", key, map[string]any{
			"url": rcv.url(), "events": []string{"conversion.created"}, "secret": rcv.secret,
		}).expect(t, "subscribe "+rcv.name, 201).object(t)
		if !strings.HasPrefix(str(sub, "id"), "sub_") || sub["hasSecret"] != true {
			t.Fatalf("POST /api/public/webhooks answered %v", sub)
		}
		subOf[str(sub, "id")] = rcv
	}
	// The partner's postback rides the same pipeline: its receiver refuses
	// the first GET for each conversion, so that retries cross the kill too.
	postbacks := newPostbackReceiver(t)
	s.call(t, "PUT", "/api/v1/partners/"+partnerID+"/postback", key, map[string]any{
		"url": postbacks.srv.URL + "/pb?cnv={conversion_id}&ev={event}",
	}).expect(t, "PUT the partner's postback", 200)

	conversions := map[string]string{} // externalTxnId → conversion id
	postWave := func(prefix string, n int) {
		for i := range n {
			txn := fmt.Sprintf("%s%02d", prefix, i)
			c := s.call(t, "POST", "/api/v1/conversions", key, map[string]any{
				"offerId": offerID, "partnerId": partnerID, "externalTxnId": txn,
			}).expect(t, "POST /api/v1/conversions", 201).object(t)
			conversions[txn] = str(c, "id")
		}
	}
	waitUntil := func(what string, limit time.Duration, cond func() bool) bool {
		deadline := time.Now().Add(limit)
		for !cond() {
			if time.Now().After(deadline) {
				t.Logf("gave up waiting for %s after %v", what, limit)
				return false
			}
			time.Sleep(2 * time.Millisecond)
		}
		return true
	}

	// Wave 1: 10 conversions whose deliveries to the failing receiver get
	// past attempt 5, so that the kill falls into the 900 ms wait before
	// attempt 6 (or the 3.6 s one before attempt 7).
	const wave1, wave2, wave3 = 10, 10, 5
	postWave("w1-", wave1)
	if !waitUntil("5 attempts of every wave-1 delivery to the failing receiver", 10*time.Second, func() bool {
		seen := failing.seenFor("w1-")
		if len(seen) < wave1 {
			return false
		}
		for _, n := range seen {
			if n < 5 {
				return false
			}
		}
		return true
	}) {
		t.Fatalf("the failing receiver got %v (wave 1); want 5 attempts per delivery\nserver log:\n%s", failing.seenFor("w1-"), s.stderr)
	}

	// Wave 2: 10 conversions whose first attempts the receivers hold.
	postWave("w2-", wave2)
	waitUntil("the receivers to hold the first attempt of every wave-2 delivery", 5*time.Second, func() bool {
		_, h1 := failing.counts()
		_, h2 := recovering.counts()
		return h1+h2 == 2*wave2
	})
	_, h1 := failing.counts()
	_, h2 := recovering.counts()
	if h1+h2 == 0 {
		t.Fatalf("no wave-2 attempt reached the receivers within 5 s\nserver log:\n%s", s.stderr)
	}

	// Wave 3: 5 conversions posted just before the kill: their events may
	// still wait in the outbox, their deliveries in the due queue.
	postWave("w3-", wave3)
	killAt := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.exited(t, 10*time.Second)
	deadAt := time.Now()
	releaseHeld()
	f1, _ := failing.counts()
	r1, _ := recovering.counts()
	lo, hi := specMaxAttempts, 0
	for id, n := range failing.seenFor("w1-") {
		lo, hi = min(lo, n), max(hi, n)
		if n >= specMaxAttempts {
			t.Errorf("wave-1 delivery %s already had all %d attempts at the kill: the kill is not mid-schedule", id, n)
		}
	}
	t.Logf("killed %v after the start: the failing receiver had %d requests (%d to %d per wave-1 delivery), the recovering one %d; %d held in flight",
		killAt.Sub(start).Round(time.Millisecond), f1, lo, hi, r1, h1+h2)

	restartAt := time.Now()
	s = serve(t, environ, "--data", data)
	readyAt := time.Now()
	t.Logf("restarted in %v", readyAt.Sub(restartAt).Round(time.Millisecond))

	// Wait until every delivery is made and decided: the last wave-1
	// attempts come 3.6 s after attempt 6, those of waves 2 and 3 about
	// 4.7 s after the restart.
	const events = wave1 + wave2 + wave3
	const want = events * 2
	var all []deliveryView
	deadline := readyAt.Add(20 * time.Second)
	for {
		all = s.listDeliveries(t, key, url.Values{"type": {"webhook"}})
		pending := 0
		for _, d := range all {
			if d.Status == "pending" {
				pending++
			}
		}
		// Once nothing is pending, only events still in the outbox could
		// add deliveries, within moments of the restart: 8 s on, missing
		// ones are lost.
		if pending == 0 && (len(all) >= want || time.Since(readyAt) > 8*time.Second) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after the restart: %d deliveries, %d of them pending; want %d, none pending\nserver log:\n%s",
				len(all), pending, want, s.stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	doneAt := time.Now()
	t.Logf("all %d deliveries decided %v after the restart", len(all), doneAt.Sub(readyAt).Round(time.Millisecond))

	// No delivery lost, none made twice: one per (conversion, subscription).
	if len(all) != want {
		t.Errorf("%d deliveries, want %d (%d events × 2 subscriptions)", len(all), want, events)
	}
	for subID := range subOf {
		ds := s.listDeliveries(t, key, url.Values{"subscriptionId": {subID}})
		if len(ds) != events {
			t.Errorf("subscription %s (%s): %d deliveries, want %d", subID, subOf[subID].name, len(ds), events)
		}
	}
	for _, status := range []string{"pending", "succeeded", "failed"} {
		ds := s.listDeliveries(t, key, url.Values{"status": {status}, "type": {"webhook"}})
		for _, d := range ds {
			if d.Status != status {
				t.Errorf("GET /deliveries?status=%s lists %s, which is %s", status, d.ID, d.Status)
			}
		}
		if wantN := map[string]int{"pending": 0, "succeeded": events, "failed": events}[status]; len(ds) != wantN {
			t.Errorf("GET /deliveries?status=%s lists %d deliveries, want %d", status, len(ds), wantN)
		}
	}

	// Each delivery in detail, against what its receiver saw.
	convIDs := map[string]bool{}
	for _, id := range conversions {
		convIDs[id] = true
	}
	type pair struct{ sub, conversion string }
	deliveryOf := map[pair]string{}
	seenEvents := map[string]string{} // event id → conversion id
	var extras int
	var lateness []time.Duration
	maxLate := time.Duration(0)
	// How late an attempt may come. Unloaded, attempts come within a few
	// milliseconds of due (the log line at the end says how late they
	// were); but before its first attempt an event waits for several
	// fsyncs in turn (the conversion, then each delivery and the outbox
	// entry), and on a shared machine with a busy disk each can take
	// 100 ms and more. Well under the pipeline's idle poll (1 s), so a lost
	// wake-up still shows.
	const lateTolerance = 600 * time.Millisecond
	const earlySlack = 2 * time.Millisecond // times are kept to the millisecond
	for _, listed := range all {
		d := deliveryView{}
		r := s.call(t, "GET", "/api/v1/deliveries/"+listed.ID, key, nil).expect(t, "GET /api/v1/deliveries/"+listed.ID, 200)
		if err := json.Unmarshal(r.body, &d); err != nil {
			t.Fatal(err)
		}
		rcv := subOf[d.SubscriptionID]
		if rcv == nil {
			t.Errorf("delivery %s belongs to an unknown subscription %q", d.ID, d.SubscriptionID)
			continue
		}
		if d.URL != rcv.url() || d.Event != "conversion.created" || d.Type != "webhook" || d.BrandID != brandID {
			t.Errorf("delivery %s: url %q event %q type %q brand %q", d.ID, d.URL, d.Event, d.Type, d.BrandID)
		}
		if len(d.Attempts) != len(listed.Attempts) || d.Status != listed.Status {
			t.Errorf("delivery %s: the list shows %d attempts (%s), GET by id %d (%s)", d.ID, len(listed.Attempts), listed.Status, len(d.Attempts), d.Status)
		}
		if d.NextAttemptAt != nil {
			t.Errorf("delivery %s is %s but has nextAttemptAt %v", d.ID, d.Status, d.NextAttemptAt)
		}
		what := fmt.Sprintf("delivery %s (%s)", d.ID, rcv.name)
		n := len(d.Attempts)
		switch rcv {
		case failing:
			if d.Status != "failed" || n != specMaxAttempts {
				t.Errorf("%s: %s after %d recorded attempts; want failed after exactly %d", what, d.Status, n, specMaxAttempts)
			}
		case recovering:
			if d.Status != "succeeded" || n < 2 || n > 3 {
				t.Errorf("%s: %s after %d recorded attempts; want succeeded after 2 or 3 (3 unless the kill cut one of the first two)", what, d.Status, n)
			}
		}
		for i, a := range d.Attempts {
			wantOK := rcv == recovering && i == n-1
			if a.Error != "" || (wantOK && a.StatusCode != 200) || (!wantOK && a.StatusCode != 500) {
				t.Errorf("%s: attempt %d: status %d error %q; want %d", what, i+1, a.StatusCode, a.Error, map[bool]int{true: 200, false: 500}[wantOK])
			}
		}

		// What the receiver saw under this webhook id: the same envelope
		// every time, signed, for this delivery's event.
		reqs := rcv.snapshot()[d.ID]
		if len(reqs) == 0 {
			t.Errorf("%s: the receiver never got it", what)
			continue
		}
		for _, q := range reqs {
			switch {
			case q.decodeErr != nil:
				t.Errorf("%s: request %d: the body is not an envelope: %v", what, q.n, q.decodeErr)
			case string(q.body) != string(reqs[0].body):
				t.Errorf("%s: request %d's body differs from request 1's:\n%s\n%s", what, q.n, q.body, reqs[0].body)
			case q.envelope.ID != d.EventID || q.envelope.Event != "conversion.created" || q.event != "conversion.created" || q.envelope.BrandID != brandID:
				t.Errorf("%s: request %d: envelope id %q event %q (header %q) brand %q; want the event %s",
					what, q.n, q.envelope.ID, q.envelope.Event, q.event, q.envelope.BrandID, d.EventID)
			}
			if err := webhook.Verify(rcv.secret, q.signature, q.body, 0); err != nil {
				t.Errorf("%s: request %d: signature: %v", what, q.n, err)
			}
		}
		conv := reqs[0].envelope.Data.ConversionID
		if !convIDs[conv] {
			t.Errorf("%s: the envelope names conversion %q, which was not created by this test", what, conv)
		}
		if prev, ok := seenEvents[d.EventID]; ok && prev != conv {
			t.Errorf("event %s is about conversion %s in one delivery and %s in another", d.EventID, prev, conv)
		}
		seenEvents[d.EventID] = conv
		k := pair{d.SubscriptionID, conv}
		if other, dup := deliveryOf[k]; dup {
			t.Errorf("conversion %s has two deliveries to %s: %s and %s", conv, rcv.name, other, d.ID)
		}
		deliveryOf[k] = d.ID

		// At least once, at most once more: every recorded attempt is a
		// request the receiver answered with the recorded status; a request
		// that was not recorded must have been in flight when the server
		// was killed (at most one per delivery: one attempt at a time).
		j := 0
		var unrecorded []hookRequest
		for i, a := range d.Attempts {
			for j < len(reqs) && reqs[j].arrived.Before(a.At.Add(-earlySlack)) {
				unrecorded = append(unrecorded, reqs[j])
				j++
			}
			if j == len(reqs) {
				t.Errorf("%s: recorded attempt %d (at %s) matches no request the receiver got", what, i+1, a.At.Format(time.StampMilli))
				break
			}
			q := reqs[j]
			if q.arrived.After(a.At.Add(time.Duration(a.LatencyMs)*time.Millisecond + 50*time.Millisecond)) {
				t.Errorf("%s: recorded attempt %d at %s (latency %d ms): the receiver's request %d came at %s",
					what, i+1, a.At.Format(time.StampMilli), a.LatencyMs, q.n, q.arrived.Format(time.StampMilli))
			}
			if q.held || q.status != a.StatusCode {
				t.Errorf("%s: recorded attempt %d has status %d, but the receiver answered %d to request %d (held: %v)",
					what, i+1, a.StatusCode, q.status, q.n, q.held)
			}
			j++
		}
		unrecorded = append(unrecorded, reqs[j:]...)
		for _, q := range unrecorded {
			if !q.arrived.Before(deadAt) {
				t.Errorf("%s: the receiver's request %d at %s is not in the log, yet the server that sent it was not killed",
					what, q.n, q.arrived.Format(time.StampMilli))
			} else {
				extras++
			}
		}
		if len(unrecorded) > 1 {
			t.Errorf("%s: %d requests the log does not show; at most one can have been cut by the kill", what, len(unrecorded))
		}
		for _, q := range reqs {
			if q.held && !slices.ContainsFunc(unrecorded, func(u hookRequest) bool { return u.n == q.n }) {
				t.Errorf("%s: request %d was held until the kill and never answered, yet it is recorded", what, q.n)
			}
		}
		if len(d.Attempts) > specMaxAttempts {
			t.Errorf("%s: %d recorded attempts, more than %d", what, len(d.Attempts), specMaxAttempts)
		}

		// The schedule, from the recorded attempts: attempt 1 when the
		// event is delivered, each retry its wait after the previous
		// attempt ended, never early; an attempt whose due time fell while
		// the server was down comes as soon as it is back.
		for i, a := range d.Attempts {
			var due time.Time
			if i == 0 {
				due = reqs[0].envelope.CreatedAt
			} else {
				p := d.Attempts[i-1]
				due = p.At.Add(time.Duration(p.LatencyMs)*time.Millisecond + scaledWait(i))
				if a.At.Before(due.Add(-earlySlack)) {
					t.Errorf("%s: attempt %d at %s, %v after attempt %d ended; the wait is %v",
						what, i+1, a.At.Format(time.StampMilli), a.At.Sub(p.At)-time.Duration(p.LatencyMs)*time.Millisecond, i, scaledWait(i))
				}
			}
			timeline := func() string {
				got := []string{"fanned out at " + d.CreatedAt.Format(time.StampMilli)}
				for _, q := range reqs {
					got = append(got, fmt.Sprintf("request %d at %s (held %v, answered %d)", q.n, q.arrived.Format(time.StampMilli), q.held, q.status))
				}
				return strings.Join(got, "; ")
			}
			checkLate := func(late time.Duration, desc string) {
				lateness = append(lateness, late)
				maxLate = max(maxLate, late)
				if late > lateTolerance {
					t.Errorf("%s: attempt %d %s, %v after it was due at %s (%s)",
						what, i+1, desc, late.Round(time.Millisecond), due.Format(time.StampMilli), timeline())
				}
			}
			if !a.At.Before(restartAt) && due.Before(readyAt) {
				// Due before the new server was up: it makes the attempt as
				// soon as it is. If it fell due while the old server ran,
				// that one should have made it then: as the request the
				// kill cut (timed like a recorded attempt), or else it was
				// late at least until the kill.
				if due.Before(killAt) {
					k := slices.IndexFunc(unrecorded, func(u hookRequest) bool { return !u.arrived.Before(due.Add(-earlySlack)) })
					if k >= 0 {
						checkLate(unrecorded[k].arrived.Sub(due), "was cut by the kill: its request came")
					} else {
						checkLate(killAt.Sub(due), "was not made before the kill,")
					}
				}
				if late := a.At.Sub(readyAt); late > lateTolerance {
					t.Errorf("%s: attempt %d came %v after the restarted server was up (%s)", what, i+1, late.Round(time.Millisecond), timeline())
				}
				continue
			}
			checkLate(a.At.Sub(due), "came")
		}
	}
	if len(seenEvents) != events {
		t.Errorf("the deliveries carry %d distinct events, want %d", len(seenEvents), events)
	}
	for txn, id := range conversions {
		for subID, rcv := range subOf {
			if _, ok := deliveryOf[pair{subID, id}]; !ok {
				t.Errorf("conversion %s (%s) has no delivery to the %s receiver", id, txn, rcv.name)
			}
		}
	}
	// The held requests were cut by the kill, so they are among the extras.
	if extras < h1+h2 {
		t.Errorf("%d requests the log does not show, but %d were held in flight at the kill", extras, h1+h2)
	}
	slices.Sort(lateness)
	t.Logf("%d requests cut by the kill and made again; attempts came at most %v after due (median %v); the test took %v",
		extras, maxLate.Round(time.Millisecond), lateness[len(lateness)/2].Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// One postback per conversion, each made (the kill lost none) and
	// succeeded at the partner's second GET or later (the first may have
	// been cut by the kill, and so be missing from the log).
	var pbs []deliveryView
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		pbs = s.listDeliveries(t, key, url.Values{"type": {"postback"}})
		if len(pbs) == events && !slices.ContainsFunc(pbs, func(d deliveryView) bool { return d.Status != "succeeded" }) || time.Now().After(deadline) {
			break
		}
	}
	pbSeen := postbacks.byConversion()
	pbOf := map[string]bool{}
	for _, d := range pbs {
		cnv := strings.TrimPrefix(d.URL, postbacks.srv.URL+"/pb?cnv=")
		cnv = strings.TrimSuffix(cnv, "&ev=conversion.created")
		if d.Status != "succeeded" || d.Type != "postback" || d.PartnerID != partnerID || !convIDs[cnv] || pbOf[cnv] || len(d.Attempts) == 0 {
			t.Errorf("postback %s: %s with %d attempts to %s (partner %q)", d.ID, d.Status, len(d.Attempts), d.URL, d.PartnerID)
		}
		pbOf[cnv] = true
		if n := pbSeen[cnv]; n < 2 || n < len(d.Attempts) || n > len(d.Attempts)+1 {
			t.Errorf("postback %s: %d recorded attempts, the partner got %d GETs", d.ID, len(d.Attempts), n)
		}
	}
	if len(pbOf) != events {
		t.Errorf("%d conversions have a postback, want all %d", len(pbOf), events)
	}

	for _, l := range s.logLines(t) {
		if l["level"] == "ERROR" {
			t.Errorf("the restarted server logged an error: %v", l)
		}
	}
	s.stop(t)
}

// postbackReceiver is a partner's postback endpoint on loopback: it counts
// the GETs per conversion and refuses the first of each.
type postbackReceiver struct {
	srv *httptest.Server
	mu  sync.Mutex
	got map[string]int // conversion id → GETs
}

func newPostbackReceiver(t *testing.T) *postbackReceiver {
	r := &postbackReceiver{got: map[string]int{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		cnv := req.URL.Query().Get("cnv")
		r.mu.Lock()
		r.got[cnv]++
		n := r.got[cnv]
		r.mu.Unlock()
		if req.Method != http.MethodGet || n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *postbackReceiver) byConversion() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.got)
}
