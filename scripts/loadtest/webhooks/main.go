// Command webhooks measures the local server's webhook pipeline: it starts
// a loopback receiver that answers 200, subscribes it to conversion.created
// on a running server and, with -postbacks, sets the partner's postback to
// it too (so every conversion makes a webhook and a postback, mixed in one
// pipeline), posts conversions and times their deliveries.
//
//   - Burst: -n conversions posted as fast as -c connections allow. It
//     reports the ingest rate meanwhile and the delivery rate: deliveries
//     per second from the first POST until all -n reached the receiver.
//   - Paced: -paced-n conversions at -paced-rate per second, a load the
//     pipeline keeps up with, for the latency from POST /conversions
//     returning to the receiver getting the webhook (p50, p90, p99, max).
//
// The burst phase reports that latency too, but there it is mostly the
// time spent in the queue behind the burst.
//
// With -server-pid (the script passes it), each phase also reports what it
// cost per conversion: the server's CPU time and the bytes it wrote to
// storage (/proc/PID/stat and /proc/PID/io; Linux), and this program's own
// CPU time (the load and the receiver). On a shared machine, whose load
// moves the rates from one run to the next, these are the steadier
// figures: the embedded store commits with fsync, so its ingest is bound
// by the bytes each commit writes once the CPU is not.
//
//   - Paced beside a hanging neighbour (with -neighbour-brand and
//     -neighbour-key, another brand's): that brand subscribes 50 endpoints
//     (the most it may) to a receiver that never answers, so that every
//     attempt runs into the 10 s limit, and posts 70 conversions (3,500
//     deliveries); then the paced phase runs again. Its latency should
//     stay what it was alone.
//
// Usage (scripts/loadtest/webhooks.sh sets everything up):
//
//	go run ./scripts/loadtest/webhooks -server http://127.0.0.1:18180 -key tally_sk_… -offer off_… -partner prt_…
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-hq/tally/internal/procstat"
)

func main() {
	server := flag.String("server", "http://127.0.0.1:18180", "the running tally server")
	key := flag.String("key", os.Getenv("KEY"), "the brand's API key (default $KEY)")
	offer := flag.String("offer", os.Getenv("OFFER"), "an active offer of the brand (default $OFFER)")
	partner := flag.String("partner", os.Getenv("PARTNER"), "an active partner of the brand (default $PARTNER)")
	n := flag.Int("n", 5000, "conversions in the burst phase (0 skips it)")
	conns := flag.Int("c", 32, "concurrent POSTs in the burst phase")
	pacedN := flag.Int("paced-n", 1000, "conversions in the paced phase (0 skips it)")
	pacedRate := flag.Float64("paced-rate", 100, "conversions per second in the paced phase")
	receiverAddr := flag.String("receiver", "127.0.0.1:0", "address of the webhook receiver this program runs")
	timeout := flag.Duration("timeout", 5*time.Minute, "how long a phase may wait for its deliveries")
	check := flag.Bool("check-log", true, "read the delivery log at the end and count its statuses")
	postbacks := flag.Bool("postbacks", false, "also set the partner's postback to the receiver: a webhook and a postback per conversion")
	compare := flag.Bool("compare", true, "run the burst once without a subscription first, for the ingest rate to compare with")
	neighbourBrand := flag.String("neighbour-brand", "", "another brand, to give hanging receivers before a second paced phase")
	neighbourKey := flag.String("neighbour-key", "", "that brand's API key")
	serverPID := flag.Int("server-pid", 0, "the server's process id, for its CPU time and bytes written per conversion (Linux)")
	flag.Parse()
	if *key == "" || *offer == "" || *partner == "" {
		fail(errors.New("-key, -offer and -partner (or $KEY, $OFFER, $PARTNER) are required"))
	}
	l := &loadtest{server: strings.TrimRight(*server, "/"), key: *key, offer: *offer, partner: *partner,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256, DisableCompression: true}},
		rcv:    newReceiver(), run: time.Now().UnixNano(), kinds: []string{kindWebhook}, serverPID: *serverPID}
	if err := l.rcv.listen(*receiverAddr); err != nil {
		fail(err)
	}
	var bare result // the burst without a subscription
	if *n > 0 && *compare {
		fmt.Printf("\n== burst without a subscription: %d conversions, %d connections\n", *n, *conns)
		kinds := l.kinds
		l.kinds = nil
		res, err := l.phase("burst without a subscription", *n, *conns, 0, *timeout)
		if err != nil {
			fail(err)
		}
		res.print()
		bare, l.kinds = res, kinds
	}
	subID, err := l.subscribe()
	if err != nil {
		fail(err)
	}
	fmt.Printf("receiver %s, subscription %s\n", l.rcv.url, subID)
	if *postbacks {
		l.kinds = append(l.kinds, kindPostback)
		pb := map[string]any{"url": l.rcv.base + "/pb?cnv={conversion_id}&payout={payout}&s1={sub1}"}
		if err := l.do("PUT", "/api/v1/partners/"+l.partner+"/postback", pb, nil); err != nil {
			fail(err)
		}
		fmt.Printf("postback of partner %s: %s\n", l.partner, pb["url"])
		defer func() {
			if err := l.do("DELETE", "/api/v1/partners/"+l.partner+"/postback", nil, nil); err != nil {
				fmt.Fprintln(os.Stderr, "delete the postback:", err)
			}
		}()
	}
	defer func() {
		// Deleting the subscription keeps later runs on the same server
		// from sending to a receiver that is gone.
		if err := l.do("DELETE", "/api/public/webhooks/"+subID, nil, nil); err != nil {
			fmt.Fprintln(os.Stderr, "delete the subscription:", err)
		}
	}()

	if *n > 0 {
		fmt.Printf("\n== burst: %d conversions, %d connections\n", *n, *conns)
		res, err := l.phase("burst", *n, *conns, 0, *timeout)
		if err != nil {
			fail(err)
		}
		res.print()
		if bare.n > 0 {
			fmt.Printf("ingest with the subscription: %.0f%% of the rate without\n", 100*res.ingestRate()/bare.ingestRate())
			res.compare(bare)
		}
	}
	if *pacedN > 0 {
		fmt.Printf("\n== paced: %d conversions at %.0f/s\n", *pacedN, *pacedRate)
		res, err := l.phase("paced", *pacedN, 0, *pacedRate, *timeout)
		if err != nil {
			fail(err)
		}
		res.print()
	}
	if *neighbourKey != "" && *pacedN > 0 {
		n, err := l.hangingNeighbour(*neighbourBrand, *neighbourKey)
		if err != nil {
			fail(err)
		}
		fmt.Printf("\n== paced beside a hanging neighbour (%d deliveries to 50 endpoints that never answer): %d conversions at %.0f/s\n", n, *pacedN, *pacedRate)
		res, err := l.phase("paced, hanging neighbour", *pacedN, 0, *pacedRate, *timeout)
		if err != nil {
			fail(err)
		}
		res.print()
	}
	fmt.Printf("\nreceiver: %d requests, %d of them repeats of a webhook id already received\n", l.rcv.total.Load(), l.rcv.repeats.Load())
	if *check {
		counts, err := l.deliveryStatuses(url.Values{"subscriptionId": {subID}})
		if err != nil {
			fail(err)
		}
		fmt.Printf("delivery log of the subscription: %v\n", counts)
		if *postbacks {
			if counts, err = l.deliveryStatuses(url.Values{"partnerId": {l.partner}}); err != nil {
				fail(err)
			}
			fmt.Printf("delivery log of the postback: %v\n", counts)
		}
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "webhooks loadtest:", err)
	os.Exit(1)
}

// ---------------------------------------------------------------------------
// The receiver

// The kinds of delivery the receiver takes: webhooks (POST /hooks) and
// postbacks (GET /pb?cnv=…).
const (
	kindWebhook  = "webhook"
	kindPostback = "postback"
)

type receiver struct {
	base, url string
	total     atomic.Int64
	repeats   atomic.Int64

	mu      sync.Mutex
	arrived map[string]time.Time // kind + conversion id → first arrival
	ids     map[string]bool      // webhook ids seen
}

func newReceiver() *receiver {
	return &receiver{arrived: map[string]time.Time{}, ids: map[string]bool{}}
}

func (r *receiver) listen(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	r.base = "http://" + ln.Addr().String()
	r.url = r.base + "/hooks"
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return nil
}

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	now := time.Now()
	kind, conversionID := kindWebhook, ""
	if req.Method == http.MethodGet && req.URL.Path == "/pb" {
		kind, conversionID = kindPostback, req.URL.Query().Get("cnv")
	} else {
		body, err := io.ReadAll(req.Body)
		var env struct {
			Data struct {
				ConversionID string `json:"conversionId"`
			} `json:"data"`
		}
		if err == nil && json.Unmarshal(body, &env) == nil {
			conversionID = env.Data.ConversionID
		}
	}
	if conversionID == "" {
		http.Error(w, "neither a conversion envelope nor a postback", http.StatusBadRequest)
		return
	}
	r.total.Add(1)
	id := req.Header.Get("X-Tally-Webhook-Id")
	r.mu.Lock()
	if r.ids[id] {
		r.repeats.Add(1)
	}
	r.ids[id] = true
	if _, ok := r.arrived[kind+conversionID]; !ok {
		r.arrived[kind+conversionID] = now
	}
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.Write([]byte(`{"ok":true}`))
}

// arrivals returns the first arrival of each delivery of the given kind
// for the conversion ids that arrived.
func (r *receiver) arrivals(kind string, ids []string) map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]time.Time, len(ids))
	for _, id := range ids {
		if at, ok := r.arrived[kind+id]; ok {
			out[id] = at
		}
	}
	return out
}

// ---------------------------------------------------------------------------
// Talking to the server

type loadtest struct {
	server, key, offer, partner string
	client                      *http.Client
	rcv                         *receiver
	kinds                       []string // what each conversion makes
	run                         int64    // makes externalTxnIds unique across runs
	seq                         atomic.Int64
	serverPID                   int // 0: no server figures
}

func (l *loadtest) do(method, path string, in, out any) error {
	return l.doAs(l.key, method, path, in, out)
}

// doAs is do with another brand's key.
func (l *loadtest) doAs(key, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		raw, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, l.server+path, body)
	if err != nil {
		return err
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := l.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

func (l *loadtest) subscribe() (string, error) {
	var sub struct{ ID string }
	err := l.do("POST", "/api/public/webhooks", map[string]any{"url": l.rcv.url, "events": []string{"conversion.created"}}, &sub)
	return sub.ID, err
}

// hangingNeighbour gives another brand 50 subscriptions to a receiver that
// holds every request until the server gives up on it, and 70 conversions;
// it returns the deliveries that makes.
func (l *loadtest) hangingNeighbour(brand, key string) (int, error) {
	const endpoints, conversions = 50, 70
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	hang := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })}
	go hang.Serve(ln)
	for i := range endpoints {
		in := map[string]any{"url": fmt.Sprintf("http://%s/hang/%d", ln.Addr(), i), "events": []string{"conversion.created"}}
		if err := l.doAs(key, "POST", "/api/public/webhooks", in, nil); err != nil {
			return 0, err
		}
	}
	var offer, partner struct{ ID string }
	if err := l.doAs(key, "POST", "/api/v1/offers", map[string]any{"name": "Neighbour", "destinationUrl": "https://shop.example/",
		"revenueCents": 1000, "payoutCents": 300, "currency": "USD"}, &offer); err != nil {
		return 0, err
	}
	if err := l.doAs("", "POST", "/api/public/brands/"+brand+"/applications", map[string]any{"name": "Neighbour", "email": "n@example.com"}, &partner); err != nil {
		return 0, err
	}
	if err := l.doAs(key, "POST", "/api/v1/partners/"+partner.ID+"/approve", nil, nil); err != nil {
		return 0, err
	}
	for i := range conversions {
		in := map[string]any{"offerId": offer.ID, "partnerId": partner.ID, "externalTxnId": fmt.Sprintf("neighbour-%d-%d", l.run, i)}
		if err := l.doAs(key, "POST", "/api/v1/conversions", in, nil); err != nil {
			return 0, err
		}
	}
	return endpoints * conversions, nil
}

// postConversion posts one conversion and returns its id and the moment the
// answer was read.
func (l *loadtest) postConversion() (string, time.Time, error) {
	var c struct{ ID string }
	txn := fmt.Sprintf("wh-load-%d-%d", l.run, l.seq.Add(1))
	err := l.do("POST", "/api/v1/conversions", map[string]any{"offerId": l.offer, "partnerId": l.partner, "externalTxnId": txn}, &c)
	return c.ID, time.Now(), err
}

// deliveryStatuses counts an endpoint's deliveries per status (filter:
// subscriptionId or partnerId).
func (l *loadtest) deliveryStatuses(filter url.Values) (map[string]int, error) {
	counts := map[string]int{}
	cursor := ""
	for {
		q := url.Values{"limit": {"100"}}
		for k, v := range filter {
			q[k] = v
		}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		var page struct {
			Data       []struct{ Status string }
			NextCursor *string
		}
		if err := l.do("GET", "/api/v1/deliveries?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		for _, d := range page.Data {
			counts[d.Status]++
		}
		if page.NextCursor == nil {
			return counts, nil
		}
		cursor = *page.NextCursor
	}
}

// ---------------------------------------------------------------------------
// A phase

type posted struct {
	id       string
	returned time.Time
}

type result struct {
	name             string
	n                int
	start            time.Time // the first POST went out
	postsDone        time.Time // the last POST returned
	lastArrival      time.Time
	kinds            []string
	deliveries       int                        // conversions × kinds
	deliveredByPosts int                        // delivered when the last POST returned
	latencies        map[string][]time.Duration // per kind
	errors           int
	firstErr         error
	maxInFlight      int64 // most POSTs under way at once (paced: grows when the server falls behind)
	// What the phase cost, from its first POST until its last delivery
	// arrived (nil: not measured).
	cost *usage
}

// phase posts n conversions, with conns concurrent connections (burst) or at
// rate per second (paced), then waits until each reached the receiver.
func (l *loadtest) phase(name string, n, conns int, rate float64, timeout time.Duration) (result, error) {
	res := result{name: name, n: n}
	var (
		mu   sync.Mutex
		done []posted
		wg   sync.WaitGroup
	)
	record := func(id string, at time.Time, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			res.errors++
			if res.firstErr == nil {
				res.firstErr = err
			}
			return
		}
		done = append(done, posted{id, at})
	}
	before, err := l.usage()
	if err != nil {
		return res, err
	}
	var inFlight, peak atomic.Int64
	post := func() {
		now := inFlight.Add(1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		record(l.postConversion())
		inFlight.Add(-1)
	}
	res.start = time.Now()
	if rate > 0 {
		// Open loop: each POST at its time, however many are still under
		// way, so that a server falling behind shows as latency rather
		// than as a lower rate.
		interval := time.Duration(float64(time.Second) / rate)
		for i := range n {
			time.Sleep(time.Until(res.start.Add(time.Duration(i) * interval)))
			wg.Go(post)
		}
	} else {
		var next atomic.Int64
		for range conns {
			wg.Go(func() {
				for next.Add(1) <= int64(n) {
					post()
				}
			})
		}
	}
	wg.Wait()
	res.postsDone = time.Now()
	res.maxInFlight = peak.Load()
	if res.errors > 0 {
		fmt.Fprintf(os.Stderr, "%d POSTs failed; the first: %v\n", res.errors, res.firstErr)
	}
	ids := make([]string, len(done))
	for i, p := range done {
		ids[i] = p.id
	}
	arrivedAll := func() (map[string]map[string]time.Time, int) {
		out, n := map[string]map[string]time.Time{}, 0
		for _, kind := range l.kinds {
			out[kind] = l.rcv.arrivals(kind, ids)
			n += len(out[kind])
		}
		return out, n
	}
	_, res.deliveredByPosts = arrivedAll()
	res.deliveries = len(ids) * len(l.kinds)

	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var arrived map[string]map[string]time.Time
	for {
		var n int
		if arrived, n = arrivedAll(); n == res.deliveries {
			break
		}
		select {
		case <-ctx.Done():
			return res, fmt.Errorf("%s: only %d of %d deliveries made after %v", name, n, res.deliveries, timeout)
		case <-time.After(5 * time.Millisecond):
		}
	}
	res.latencies = map[string][]time.Duration{}
	for _, kind := range l.kinds {
		for _, p := range done {
			at := arrived[kind][p.id]
			if at.After(res.lastArrival) {
				res.lastArrival = at
			}
			res.latencies[kind] = append(res.latencies[kind], at.Sub(p.returned))
		}
		slices.Sort(res.latencies[kind])
	}
	res.kinds = l.kinds
	if before != nil {
		after, err := l.usage()
		if err != nil {
			return res, err
		}
		res.cost = after.minus(*before)
	}
	return res, nil
}

// usage is what the server and this program have used so far.
type usage struct{ server, self procstat.Usage }

// usage reads the server's and this program's usage so far; nil without
// a server pid.
func (l *loadtest) usage() (*usage, error) {
	if l.serverPID == 0 {
		return nil, nil
	}
	server, err := procstat.Read(strconv.Itoa(l.serverPID))
	if err != nil {
		return nil, err
	}
	self, err := procstat.Read("self")
	return &usage{server, self}, err
}

func (u usage) minus(v usage) *usage {
	return &usage{server: u.server.Sub(v.server), self: u.self.Sub(v.self)}
}

// perConversion is the cost of a phase of n conversions, per conversion.
func (u usage) perConversion(n int) (serverCPU, selfCPU time.Duration, written float64) {
	d := time.Duration(max(n, 1))
	return u.server.CPU / d, u.self.CPU / d, float64(u.server.Written) / float64(max(n, 1))
}

// ingestRate is the conversions posted per second.
func (r result) ingestRate() float64 {
	return float64(r.n-r.errors) / r.postsDone.Sub(r.start).Seconds()
}

func (r result) print() {
	defer r.printCost()
	if len(r.kinds) == 0 {
		fmt.Printf("ingest:     %d conversions in %v: %.0f/s (%d POSTs failed)\n", r.n-r.errors, r.postsDone.Sub(r.start).Round(time.Millisecond), r.ingestRate(), r.errors)
		return
	}
	ok := r.deliveries / len(r.kinds)
	posting := r.postsDone.Sub(r.start)
	all := r.lastArrival.Sub(r.start)
	fmt.Printf("ingest:     %d conversions in %v: %.0f/s (%d POSTs failed, at most %d under way at once)\n",
		ok, posting.Round(time.Millisecond), float64(ok)/posting.Seconds(), r.errors, r.maxInFlight)
	fmt.Printf("deliveries: all %d (%s) delivered %v after the first POST: %.0f/s; %d of them (%.0f%%) by the time the last POST returned\n",
		r.deliveries, strings.Join(r.kinds, "s + ")+"s", all.Round(time.Millisecond), float64(r.deliveries)/all.Seconds(), r.deliveredByPosts,
		100*float64(r.deliveredByPosts)/float64(max(r.deliveries, 1)))
	if after := r.lastArrival.Sub(r.postsDone); r.deliveries > r.deliveredByPosts && after > 0 {
		fmt.Printf("            while posting %.0f/s, after it %.0f/s (%d in %v)\n",
			float64(r.deliveredByPosts)/posting.Seconds(), float64(r.deliveries-r.deliveredByPosts)/after.Seconds(), r.deliveries-r.deliveredByPosts, after.Round(time.Millisecond))
	}
	for _, kind := range r.kinds {
		if ls := r.latencies[kind]; len(ls) > 0 {
			fmt.Printf("latency, POST returned → receiver got the %s: p50 %v  p90 %v  p99 %v  max %v\n",
				kind, pct(ls, 50), pct(ls, 90), pct(ls, 99), ls[len(ls)-1].Round(10*time.Microsecond))
		}
	}
}

func (r result) printCost() {
	if r.cost == nil {
		return
	}
	server, self, written := r.cost.perConversion(r.n - r.errors)
	fmt.Printf("per conversion: server CPU %v, server wrote %.1f KB; load and receiver CPU %v\n",
		server.Round(time.Microsecond), written/1024, self.Round(time.Microsecond))
}

// compare says what the phase cost per conversion against one without a
// subscription.
func (r result) compare(bare result) {
	if r.cost == nil || bare.cost == nil {
		return
	}
	server, self, written := r.cost.perConversion(r.n - r.errors)
	bServer, bSelf, bWritten := bare.cost.perConversion(bare.n - bare.errors)
	fmt.Printf("the burst without a subscription cost per conversion %.0f%% of this one's server CPU, %.0f%% of its bytes written, %.0f%% of its CPU in all (server, load, receiver)\n",
		100*float64(bServer)/float64(max(server, 1)), 100*bWritten/max(written, 1), 100*float64(bServer+bSelf)/float64(max(server+self, 1)))
}

func pct(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p + 99) / 100 // nearest rank
	return sorted[max(i-1, 0)].Round(10 * time.Microsecond)
}
