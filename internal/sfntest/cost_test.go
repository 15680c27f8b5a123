package sfntest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sfn"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/deploy"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/deliver"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/lambdafn/rollup"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reporoot"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Prices: AWS's on-demand list prices in us-east-1, dollars per unit.
const (
	priceWRU        = 0.625e-6
	priceRRU        = 0.125e-6
	priceHTTPAPI    = 1.00e-6
	priceSQS        = 0.40e-6
	priceTransition = 25e-6
	priceInvoke     = 0.20e-6
	priceGBSecond   = 0.0000133334 // Lambda arm64
	lambdaGB        = 0.25         // every function has 256 MB
	priceLogGB      = 0.50         // CloudWatch Logs ingestion (standard class)
	priceStorageGB  = 0.25         // DynamoDB Standard, per GB-month, the indexes included
	pricePITRGB     = 0.20         // point-in-time recovery, per GB-month of the table (not its GSIs)
	priceAlarm      = 0.10         // a standard-resolution alarm, per metric it watches, per month
	priceMetric     = 0.30         // a custom metric (one name and set of dimension values), per month
	priceKMSKey     = 1.00         // a customer managed KMS key, per month
)

// What the cost tables assume beyond what the code does.
const (
	// platformLogBytes is what Lambda writes itself per invocation (text
	// format): the START, END and REPORT lines, about 75, 55 and 150 bytes;
	// none when its functions' SystemLogLevel is WARN (platformLogged).
	platformLogBytes = 280
	// logEventOverhead is the 26 bytes CloudWatch Logs counts on each log
	// event it ingests.
	logEventOverhead = 26
	// alarmVolume is the conversions a month the alarms' fixed cost is
	// spread over: 10 M (about 4 a second on average).
	alarmVolume = 10e6
	// month is a billing month, for the byte-months of storage.
	month = 730 * time.Hour
	// rateLimit is the API keys' RateLimit (requests a minute): the
	// alarmVolume is 3.9 conversions a second on average, more than the
	// default 100 a minute (1.7 a second) admits, so a stack that carries
	// it raises the limit; 6,000 a minute (100 a second) leaves room for
	// peaks of 25 times the average. It sets the rate counter's leases
	// (ratelimit.MostLeased: up to 64 places a write).
	rateLimit = 6_000
)

// bill is what one stage of the pipeline did, counted on the real code
// path.
type bill struct {
	stage       string
	db          dynamotest.Usage
	sqs         int     // SQS requests
	starts      int     // StartExecution calls
	transitions int     // Step Functions state transitions
	invocations float64 // Lambda invocations
	lambdaMs    float64 // Lambda duration, modelled (see below)
	http        int     // HTTP API requests
	logBytes    float64 // CloudWatch Logs ingested: the handlers' lines, measured, and Lambda's own, modelled
	// Storage: byte-months of the table's items (billed for storage and
	// point-in-time recovery) and of their index entries (storage only).
	tableByteMonths, indexByteMonths float64
	fixed                            float64 // dollars that are not a unit price times a count (alarms)
}

func (b bill) dollars() float64 {
	return b.db.WRU*priceWRU + b.db.RRU*priceRRU + float64(b.sqs)*priceSQS + float64(b.transitions)*priceTransition +
		b.invocations*priceInvoke + b.lambdaMs/1000*lambdaGB*priceGBSecond + float64(b.http)*priceHTTPAPI +
		b.logBytes/1e9*priceLogGB + b.tableByteMonths/1e9*(priceStorageGB+pricePITRGB) + b.indexByteMonths/1e9*priceStorageGB + b.fixed
}

// costTable prints the bills per million of n units (conversions or
// deliveries) as docs/aws.md shows them, and returns the total.
func costTable(t *testing.T, title string, n int, bills []bill) float64 {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s, per 1M:\n| stage | DynamoDB calls | WRU | RRU | bytes written | SQS requests | executions | transitions | Lambda invocations | logs | stored | $ |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n", title)
	per := 1e6 / float64(n)
	total := 0.0
	for _, x := range bills {
		calls := 0
		for op, c := range x.db.Calls {
			if op != "items written" {
				calls += c
			}
		}
		d := x.dollars() * per
		total += d
		fmt.Fprintf(&b, "| %s | %.2f M | %.2f M | %.2f M | %.0f MB | %.2f M | %.2f M | %.2f M | %.2f M | %.0f MB | %.2f GB-mo | %.2f |\n", x.stage,
			float64(calls)*per/1e6, x.db.WRU*per/1e6, x.db.RRU*per/1e6, float64(x.db.BytesWritten)*per/1e6,
			float64(x.sqs)*per/1e6, float64(x.starts)*per/1e6, float64(x.transitions)*per/1e6, x.invocations*per/1e6,
			x.logBytes*per/1e6, (x.tableByteMonths+x.indexByteMonths)*per/1e9, d)
	}
	fmt.Fprintf(&b, "| **total** | | | | | | | | | | | **%.2f** |", total)
	t.Log(b.String())
	return total
}

// Lambda durations are modelled, not measured (a test on a shared machine
// says nothing about Lambda's): an API request 20 ms, a stream batch 10 ms
// per record, a delivery batch 300 ms (its receivers are called at once),
// an attempt task 100 ms. They are a small part of the bill either way.
const (
	apiMs, fanoutMsPerRecord, deliverMsPerBatch, attemptMs = 20, 10, 300, 100
	rollupMsPerBatch                                       = 50
	fanoutBatch, deliverBatch                              = 100, 10 // the event source mappings' batch sizes
)

// countingQueue counts the SendMessageBatch calls of the fan-out.
type countingQueue struct {
	queue.Queue
	mu    sync.Mutex
	calls int
}

func (q *countingQueue) SendBatch(ctx context.Context, url string, msgs []sqsjson.Message) error {
	q.mu.Lock()
	q.calls++
	q.mu.Unlock()
	return q.Queue.SendBatch(ctx, url, msgs)
}

func (q *countingQueue) take() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.calls
	q.calls = 0
	return n
}

// countingExecutions is Step Functions for the cost scenarios: it counts
// StartExecution and runs nothing (the scenario makes the attempts the
// execution would, with the attempt function's handler, so that the meter
// sees them; sfntest.Server runs real executions in the other tests).
type countingExecutions struct {
	mu    sync.Mutex
	names []string
}

func (c *countingExecutions) StartExecution(_ context.Context, in *sfn.StartExecutionInput, _ ...func(*sfn.Options)) (*sfn.StartExecutionOutput, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.names = append(c.names, *in.Name)
	return &sfn.StartExecutionOutput{}, nil
}

func (c *countingExecutions) DescribeExecution(context.Context, *sfn.DescribeExecutionInput, ...func(*sfn.Options)) (*sfn.DescribeExecutionOutput, error) {
	panic("the cost scenarios start every execution once")
}

// costPipeline runs conversions through the AWS path with every DynamoDB
// call metered: the conversions API function, the stream (filtered as the
// mapping does) into the fanout function, fauxqs, the deliver function.
// The functions log as deployed (JSON lines at info, metrics as EMF lines),
// into logs, which counts the bytes CloudWatch Logs would ingest.
type costPipeline struct {
	f        *fixture
	meter    *dynamotest.Meter
	q        *countingQueue
	ex       *countingExecutions
	logs     *logCounter
	log      *slog.Logger
	metrics  *emf.Metrics
	before   map[string]map[string]types.AttributeValue // the table before the last run's conversions
	platform float64                                    // Lambda's own log bytes per invocation (platformLogged)
	// deliverer is the deliver function's instance, kept from run to run
	// with what it caches (the endpoints' answer dictionaries).
	deliverer *service.Service
}

// newCostPipeline makes the brand's one subscription to a receiver that
// answers with status and answer (nil: a few bytes).
func newCostPipeline(t *testing.T, status func(n int) int, answer []byte) (*costPipeline, string, string, string) {
	f := newFixture(t)
	rcv := newReceiver(t, status)
	rcv.answer = answer
	f.subscribe(t, rcv.URL, secret, tally.EventConversionCreated)
	key, offerID, partnerID := f.conversionSetup(t)
	logs := &logCounter{}
	p := &costPipeline{f: f, meter: dynamotest.NewMeter(f.client, f.table), ex: &countingExecutions{}, logs: logs,
		log: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})), metrics: emf.New(logs), platform: platformLogged(t)}
	p.q = &countingQueue{Queue: sqstest.NewSender(sqstest.Endpoint(t))}
	p.deliverer = p.service()
	return p, key, offerID, partnerID
}

// service is a function's service over the metered table, as deployed:
// the stream adds conversions to the rollups and carries them to the
// fan-out (service.OnAWS, as the functions wire it), its conversions and
// attempts counted in EMF lines.
func (p *costPipeline) service() *service.Service {
	return servicetest.New(dynamo.New(p.meter, p.f.table), service.OnAWS(), service.WithObserver(p.metrics))
}

// logged is the log bytes since the last call, with Lambda's own lines
// for the invocations.
func (p *costPipeline) logged(invocations float64) float64 {
	return float64(p.logs.take()) + invocations*p.platform
}

// platformLogged is what Lambda's own lines add per invocation: its START,
// END and REPORT lines are INFO, so none when every function of
// template.yaml logs JSON at SystemLogLevel WARN.
func platformLogged(t *testing.T) float64 {
	tmpl := readTemplate(t)
	fns := bytes.Count(tmpl, []byte("Type: AWS::Serverless::Function"))
	if bytes.Count(tmpl, []byte("LogFormat: JSON")) == fns && bytes.Count(tmpl, []byte("SystemLogLevel: WARN")) == fns {
		return 0
	}
	return platformLogBytes + 3*logEventOverhead
}

// logCounter counts what CloudWatch Logs would ingest of the lines written
// to it: their bytes and 26 more per line.
type logCounter struct {
	mu sync.Mutex
	n  int
	// series are the custom metrics the EMF lines made: each name with
	// each set of dimension values is one, billed by the month.
	series map[string]bool
}

func (c *logCounter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n += len(b) + logEventOverhead*bytes.Count(b, []byte("\n"))
	for line := range bytes.Lines(b) {
		var emf struct {
			AWS struct {
				CloudWatchMetrics []struct {
					Namespace  string
					Dimensions [][]string
					Metrics    []struct{ Name string }
				}
			} `json:"_aws"`
		}
		var values map[string]any
		if json.Unmarshal(line, &emf) != nil || json.Unmarshal(line, &values) != nil {
			continue
		}
		for _, d := range emf.AWS.CloudWatchMetrics {
			for _, dims := range d.Dimensions {
				for _, m := range d.Metrics {
					key := d.Namespace + " " + m.Name
					for _, name := range dims {
						key += fmt.Sprintf(" %s=%v", name, values[name])
					}
					if c.series == nil {
						c.series = map[string]bool{}
					}
					c.series[key] = true
				}
			}
		}
	}
	return len(b), nil
}

// metrics is the bill of the custom metrics the pipeline's EMF lines
// made, each kept by CloudWatch every hour of a month that a flow of
// alarmVolume conversions puts data in it, spread over that flow: for n
// of them.
func (c *logCounter) metrics(n int) bill {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bill{stage: fmt.Sprintf("custom metrics (%d, at %.0f M conversions a month)", len(c.series), alarmVolume/1e6), db: dynamotest.Usage{Calls: map[string]int{}},
		fixed: float64(len(c.series)) * priceMetric * float64(n) / alarmVolume}
}

func (c *logCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// run records n conversions, adds them to the rollups from the stream and
// takes them through fan-out and attempt 1, returning the bills of the four
// stages (conversion, rollup, fan-out, deliver) and of what the n
// conversions leave stored, and the executions started.
func (p *costPipeline) run(t *testing.T, tag string, n int, key, offerID, partnerID string) []bill {
	ctx := t.Context()
	started := len(p.ex.names)
	handler, err := api.APIHandler(p.service().API(), httpapi.Config{Logger: p.log, Requests: p.metrics, RateLimit: rateLimit}, httpapi.GroupConversions)
	if err != nil {
		t.Fatal(err)
	}
	api := emf.PerInvocation(p.metrics, handler) // as api.Serve starts it
	// One request first, so that the instance's caches (key, offer) are warm
	// as they are in a steady flow; it is not counted.
	post := func(i int) {
		body := fmt.Sprintf(`{"offerId":%q,"partnerId":%q,"externalTxnId":"%s-%d","revenueCents":8990,"payoutCents":1500,"currency":"EUR","sub1":"newsletter-nov"}`, offerID, partnerID, tag, i)
		resp, err := api(lambdaContext(ctx, "conversions"), roundTrip(t, apiEvent("POST", "/api/v1/conversions", key, body)))
		if err != nil || resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /api/v1/conversions: %v, status %d: %s", err, resp.StatusCode, resp.Body)
		}
	}
	post(0)
	p.meter.Take()
	p.logs.take()
	before := p.f.scan(t)
	for i := range n {
		post(i + 1)
	}
	conv := bill{stage: "conversion (API)", db: p.meter.Take(), invocations: float64(n), lambdaMs: float64(n) * apiMs, http: n, logBytes: p.logged(float64(n))}

	var batch, rollups []events.DynamoDBEventRecord
	patterns, rollupPatterns := filterPatterns(t, "FanoutFunction"), filterPatterns(t, "RollupFunction")
	for _, rec := range p.f.readStream(t) {
		if matchesAny(t, patterns, rec) {
			batch = append(batch, rec)
		}
		if matchesAny(t, rollupPatterns, rec) {
			rollups = append(rollups, rec)
		}
	}
	// The events of the n conversions, the last writes; the set-up's and
	// the warm-up's are not fanned out.
	batch, rollups = batch[len(batch)-n:], rollups[len(rollups)-n:]

	// The n conversions in one batch of the rollup function (its mapping
	// takes up to 1000, gathered for up to 15 s).
	ev := events.DynamoDBTimeWindowEvent{DynamoDBEvent: events.DynamoDBEvent{Records: rollups}}
	ev.ShardID, ev.EventSourceARN = "shardId-00000001795300000000-4b2e9c1a", rollups[0].EventSourceArn
	if _, err := rollup.Handler(p.service().Reports, p.log)(lambdaContext(ctx, "rollup"), roundTrip(t, ev)); err != nil {
		t.Fatalf("rollup: %v", err)
	}
	roll := bill{stage: "rollup (stream)", db: p.meter.Take(), invocations: 1, lambdaMs: rollupMsPerBatch, logBytes: p.logged(1)}

	client := sqstest.NewClient(sqstest.Endpoint(t))
	deliveryQueue, _ := sqstest.NewQueueWithDLQ(t, client, 180*time.Second, 5)
	fanout := fanout.Handler(p.service().Webhooks, p.q, deliveryQueue.URL, p.log)
	if out, err := fanout(lambdaContext(ctx, "fanout"), roundTrip(t, events.DynamoDBEvent{Records: batch})); err != nil || len(out.BatchItemFailures) > 0 {
		t.Fatalf("fanout: %v, failures %+v", err, out.BatchItemFailures)
	}
	fan := bill{stage: "fan-out (stream)", db: p.meter.Take(), sqs: p.q.take(), invocations: float64(n) / fanoutBatch, lambdaMs: float64(n) * fanoutMsPerRecord,
		logBytes: p.logged(float64(n) / fanoutBatch)}

	h := emf.PerInvocation(p.metrics, deliver.DeliverHandler(p.deliverer.Webhooks, loopbackSender(), p.ex, stateMachineARN, deliver.Later(p.q, deliveryQueue.URL), p.log)) // as deliver.ServeDeliver starts it
	msgs := 0
	for msgs < n {
		// A receive may return fewer than are queued, none even: it waits
		// up to a second for more before the count is judged.
		got := sqstest.Receive(t, client, deliveryQueue, deliverBatch, time.Second)
		if len(got) == 0 {
			break
		}
		msgs += len(got)
		resp, err := h(lambdaContext(ctx, "deliver"), roundTrip(t, events.SQSEvent{Records: got}))
		if err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("deliver: %v, failures %+v", err, resp.BatchItemFailures)
		}
		sqstest.Finish(t, client, deliveryQueue, got, resp)
	}
	if msgs != n {
		t.Fatalf("the deliver function got %d messages, want %d", msgs, n)
	}
	batches := float64(n) / deliverBatch
	// The event source mapping's ReceiveMessage and DeleteMessageBatch per
	// batch (its empty long polls are a fixed cost, not per delivery).
	del := bill{stage: "deliver (attempt 1)", db: p.meter.Take(), sqs: int(2 * batches), starts: len(p.ex.names) - started,
		invocations: batches, lambdaMs: batches * deliverMsPerBatch, logBytes: p.logged(batches)}
	p.before = before
	return []bill{conv, roll, fan, del}
}

// scan returns the keys of the table's items.
func (f *fixture) scan(t *testing.T) map[string]map[string]types.AttributeValue {
	t.Helper()
	out := map[string]map[string]types.AttributeValue{}
	p := dynamodb.NewScanPaginator(f.client, &dynamodb.ScanInput{TableName: aws.String(f.table), ConsistentRead: aws.Bool(true)})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range page.Items {
			out[it["pk"].(*types.AttributeValueMemberS).Value+"\x00"+it["sk"].(*types.AttributeValueMemberS).Value] = it
		}
	}
	return out
}

// storage is the bill of the items that are in the table now and were
// not before, kept until their TTL: each item (its storage and
// point-in-time recovery) and its index entries (storage). An item without
// a TTL (a conversion, kept as long as the brand is) is counted for one
// month: each month after costs as much again.
// Only items of the kinds keep accepts count (nil: all); an item's kind is
// the first part of its partition key, or the third of a brand's (CNV, WH).
func (f *fixture) storage(t *testing.T, before map[string]map[string]types.AttributeValue, keep func(kind string) bool) bill {
	t.Helper()
	now := time.Now()
	b := bill{stage: "storage with PITR (each item until its TTL; one without a TTL a month, and as much again every month kept)", db: dynamotest.Usage{Calls: map[string]int{}}}
	kinds := map[string][3]float64{} // items, bytes, byte-months
	for k, it := range f.scan(t) {
		if _, ok := before[k]; ok {
			continue
		}
		parts := strings.Split(it["pk"].(*types.AttributeValueMemberS).Value, "#")
		kind := parts[0]
		if kind == "BRD" && len(parts) > 2 {
			kind = parts[2]
		}
		if keep != nil && !keep(kind) {
			continue
		}
		months := 1.0
		if ttl, ok := it[dynamo.TTLAttribute].(*types.AttributeValueMemberN); ok {
			at, err := strconv.ParseInt(ttl.Value, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			months = time.Unix(at, 0).Sub(now).Hours() / month.Hours()
		}
		size, idx := float64(dynamotest.ItemSize(it)+dynamotest.ItemStorageOverhead), 0.0
		for _, ix := range dynamotest.Indexes {
			if ix.Has(it) {
				idx += float64(dynamotest.ItemSize(ix.Entry(it)) + dynamotest.IndexEntryOverhead)
			}
		}
		b.tableByteMonths += size * months
		b.indexByteMonths += idx * months
		c := kinds[kind]
		kinds[kind] = [3]float64{c[0] + 1, c[1] + size + idx, c[2] + (size+idx)*months}
	}
	var sb strings.Builder
	for _, k := range slices.Sorted(maps.Keys(kinds)) {
		c := kinds[k]
		fmt.Fprintf(&sb, "\n  %s: %.0f items, %.0f bytes each with their index entries, kept %.1f months", k, c[0], c[1]/c[0], c[2]/c[1])
	}
	t.Logf("stored:%s", sb.String())
	return b
}

// alarms is the bill of the stack's alarms and KMS keys, spread over
// alarmVolume conversions a month: for n of them. CloudWatch bills an
// alarm per metric it watches: one on metric math, per metric the math
// reads.
func alarms(t *testing.T, n int) bill {
	t.Helper()
	tpl, err := deploy.Parse(readTemplate(t))
	if err != nil {
		t.Fatal(err)
	}
	all, err := tpl.Alarms()
	if err != nil {
		t.Fatal(err)
	}
	metrics := 0
	for _, a := range all {
		metrics += max(1, len(a.Inputs))
	}
	keys := len(tpl.IDs("AWS::KMS::Key")) // the alarm topic's and the signing secrets'
	return bill{stage: fmt.Sprintf("alarms (%d, watching %d metrics) and KMS keys (%d), at %.0f M conversions a month", len(all), metrics, keys, alarmVolume/1e6), db: dynamotest.Usage{Calls: map[string]int{}},
		fixed: (float64(metrics)*priceAlarm + float64(keys)*priceKMSKey) * float64(n) / alarmVolume}
}

func readTemplate(t *testing.T) []byte {
	t.Helper()
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := os.ReadFile(filepath.Join(root, "template.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return tmpl
}

// answer4K is a receiver's answer of 4 KiB, the most an attempt reads of
// one: the first 4 KiB of an HTML page (testdata/answer.html, a shop's
// order page: what a receiver that is a site's catch-all route answers),
// which compresses about as such pages do.
var answer4K = func() []byte {
	b, err := os.ReadFile("testdata/answer.html")
	if err != nil || len(b) < 4096 {
		panic(fmt.Sprintf("testdata/answer.html: %d bytes, %v; want at least 4096", len(b), err))
	}
	return b[:4096]
}()

// The receivers' answers the cost tables are made for: a few bytes, and 4 KiB.
var costAnswers = []struct {
	name   string
	answer []byte
}{{"small answer", nil}, {"4 KiB answer", answer4K}}

// The cost of a conversion with one webhook subscription to a healthy
// receiver, counted on the AWS path: docs/aws.md's table comes from this
// test's log (go test -run TestCost -v ./internal/sfntest).
func TestCostHealthyConversions(t *testing.T) {
	t.Parallel()
	for _, a := range costAnswers {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			costHealthyConversions(t, a.name, a.answer)
		})
	}
}

func costHealthyConversions(t *testing.T, name string, answer []byte) {
	const n = 20
	p, key, offerID, partnerID := newCostPipeline(t, ok200, answer)
	// In a steady flow the endpoint's last success was refreshed within
	// the minute: that write is once a minute per endpoint, not per
	// delivery (on a fresh endpoint, the first batch's attempts would each
	// refresh it at once).
	p.f.setSubscription(t, map[string]string{"lastSuccessAt": strconv.FormatInt(time.Now().UnixMilli(), 10)})
	// Nor is the endpoint's answer dictionary new: it is written once a
	// week (endpoints.Answers), and the deliver function's instance has it
	// read. One conversion first, through every stage, makes it so.
	p.run(t, "warm-up", 1, key, offerID, partnerID)
	bills := p.run(t, "order", n, key, offerID, partnerID)
	if len(p.ex.names) != 0 {
		t.Fatalf("a healthy receiver started %d executions", len(p.ex.names))
	}
	all := append(slices.Clone(bills), p.f.storage(t, p.before, nil), alarms(t, n), p.logs.metrics(n))
	// A conversion with one webhook subscription to a healthy receiver,
	// every stage, its logs, what it leaves stored, the alarms and the
	// custom metrics included, costs at most $10 a million.
	total := costTable(t, "conversions, one healthy webhook subscription, "+name, n, all)
	if total > 10 {
		t.Errorf("1M conversions with one healthy subscription (%s) cost $%.2f, want at most $10", name, total)
	}
	// The webhook pipeline's share (fan-out and delivery): each delivery
	// written once, with attempt 1's outcome (docs/aws.md, "Cost"), and an
	// answer like the endpoint's others compressed to a few bytes.
	if pipeline := costTable(t, "their webhook deliveries, "+name, n, bills[2:]); pipeline > 2.5 {
		t.Errorf("the deliveries of 1M conversions (%s) cost $%.2f, want at most $2.50", name, pipeline)
	}
	// The fan-out reads the brand's subscriptions and the partner's
	// postback once for the stream batch (webhooks.Reads), not per event.
	if rru := bills[2].db.RRU; rru > 2 {
		t.Errorf("the fan-out of a batch of %d conversions of one brand read %.1f read units, want at most 2", n, rru)
	}
	// Attempt 1 reads the delivery (absent) and its endpoint; the event's
	// envelope comes in the message.
	if rru := bills[3].db.RRU / n; rru > 2 {
		t.Errorf("attempt 1 of a delivery read %.1f read units, want at most 2", rru)
	}
	// The rate counter (a write for several requests of a lease), the
	// marker holding the conversion's id and the conversion with its two
	// index entries: conditional puts, no transaction
	// (service.WithStreamConversions).
	if wru := bills[0].db.WRU / n; wru > 5 {
		t.Errorf("a conversion costs %.1f write units, want at most 5", wru)
	}
	// A batch adds each rollup item it touches once, with the shard's
	// checkpoint: here 2 rollup items, the partner's balance and its owed
	// entry (package ledger), and the checkpoint, for all n conversions.
	if wru := bills[1].db.WRU / n; wru > 10.0/n {
		t.Errorf("the rollups of a conversion cost %.2f write units, want at most %.2f", wru, 10.0/n)
	}
}

// The cost of deliveries to a receiver that is always down (503 at once),
// once its circuit is open (the first few deliveries of an outage run
// their own schedules; TestBreakerParksDeliveriesOfADownEndpoint): each
// delivery is parked behind the probe, whose one execution is a cost per
// outage, not per delivery. The endpoint stays down until its health
// disables it (DefaultDisableAfterFailures probes that failed every attempt, or
// DefaultDisableAfterFailing); then the reconciler releases the parked
// deliveries and each fails without a request.
func TestCostDownReceiver(t *testing.T) {
	t.Parallel()
	for _, a := range costAnswers {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			costDownReceiver(t, a.name, a.answer)
		})
	}
}

func costDownReceiver(t *testing.T, name string, answer []byte) {
	const n = 20
	p, key, offerID, partnerID := newCostPipeline(t, func(int) int { return http.StatusServiceUnavailable }, answer)
	p.run(t, "outage", 12, key, offerID, partnerID) // opens the circuit: 10 schedules of their own, then a probe
	probes := len(p.ex.names)
	bills := p.run(t, "order", n, key, offerID, partnerID)[2:]
	if started := len(p.ex.names) - probes; started != 0 {
		t.Fatalf("behind an open circuit, %d deliveries started %d executions, want none", n, started)
	}

	p.f.disableSubscription(t)
	p.meter.Take()
	p.logs.take()
	client := sqstest.NewClient(sqstest.Endpoint(t))
	deliveryQueue, _ := sqstest.NewQueueWithDLQ(t, client, 180*time.Second, 5)
	sender := &countingReconcileQueue{countingQueue: countingQueue{Queue: sqstest.NewSender(sqstest.Endpoint(t))}}
	res, err := fanout.DefaultReconciler.Handler(p.service().Webhooks, sender, deliveryQueue.URL, p.log)(lambdaContext(t.Context(), "reconciler"), events.EventBridgeEvent{})
	if err != nil || res.Released < n {
		t.Fatalf("reconciler: %+v, %v; want the %d parked deliveries released", res, err, n)
	}
	h := emf.PerInvocation(p.metrics, deliver.DeliverHandler(p.deliverer.Webhooks, loopbackSender(), p.ex, stateMachineARN, deliver.Later(p.q, deliveryQueue.URL), p.log))
	for {
		// Waits a second before taking an empty answer as the end: a
		// receive that does not wait may come back empty from a queue
		// that still holds messages (10 of 20 deliveries were left
		// pending so, once, on a loaded machine).
		got := sqstest.Receive(t, client, deliveryQueue, deliverBatch, time.Second)
		if len(got) == 0 {
			break
		}
		if resp, err := h(lambdaContext(t.Context(), "deliver"), roundTrip(t, events.SQSEvent{Records: got})); err != nil || len(resp.BatchItemFailures) > 0 {
			t.Fatalf("deliver: %v, failures %+v", err, resp.BatchItemFailures)
		}
		sqstest.Finish(t, client, deliveryQueue, got, events.SQSEventResponse{})
	}
	// Scaled to the measured n: the released deliveries of the warm-up
	// are counted too, so scale by what was released.
	released := float64(res.Released)
	rel := p.meter.Take()
	scale := func(x float64) float64 { return x * n / released }
	rel.WRU, rel.RRU, rel.BytesWritten = scale(rel.WRU), scale(rel.RRU), int(scale(float64(rel.BytesWritten)))
	for op, c := range rel.Calls {
		rel.Calls[op] = int(scale(float64(c)))
	}
	bills = append(bills, bill{stage: "release (endpoint disabled)", db: rel, sqs: int(scale(float64(sender.take()) + 2*released/deliverBatch)),
		invocations: scale(released / deliverBatch), lambdaMs: scale(released / deliverBatch * deliverMsPerBatch),
		logBytes: scale(p.logged(1 + released/deliverBatch))})
	// What the deliveries leave stored: each delivery and its event (the
	// conversions are not counted).
	bills = append(bills, p.f.storage(t, p.before, func(kind string) bool { return kind == "WH" || kind == "EVT" }), alarms(t, n), p.logs.metrics(n))
	for _, d := range p.f.mustDeliveries(t) {
		if d.Status != tally.DeliveryFailed && len(d.Attempts) == 0 {
			t.Errorf("delivery %s is %s after its endpoint was disabled, want failed", d.ID, d.Status)
		}
	}
	if total := costTable(t, "deliveries to a receiver that is always down (the conversions not counted), "+name, n, bills); total > 30 {
		t.Errorf("1M deliveries to a down receiver (%s) cost $%.2f, want at most $30", name, total)
	}
}

// countingReconcileQueue is the reconciler's queue, counting its sends.
type countingReconcileQueue struct{ countingQueue }

func (q *countingReconcileQueue) ApproximateNumberOfMessages(ctx context.Context, url string) (int, error) {
	q.mu.Lock()
	q.calls++
	q.mu.Unlock()
	return q.Queue.(fanout.ReconcileQueue).ApproximateNumberOfMessages(ctx, url)
}

func (f *fixture) mustDeliveries(t *testing.T) []tally.Delivery {
	t.Helper()
	ds, _, err := f.svc.Deliveries.Deliveries(t.Context(), f.brand.ID, endpoints.DeliveryFilter{}, records.ListParams{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// disableSubscription disables the brand's one subscription, as its health
// does after enough failures (the store's attributes: there is no API to).
func (f *fixture) disableSubscription(t *testing.T) {
	t.Helper()
	f.setSubscription(t, map[string]string{"status": tally.EndpointDisabled, "disabledReason": tally.DisabledConsecutiveFailures, "disabledAt": "1"})
}

// setSubscription sets attributes of the brand's one subscription.
func (f *fixture) setSubscription(t *testing.T, set map[string]string) {
	t.Helper()
	subs, _, err := f.svc.Endpoints.Subscriptions(t.Context(), f.brand.ID, records.ListParams{Limit: 1})
	if err != nil || len(subs) != 1 {
		t.Fatalf("subscriptions: %v, %v", subs, err)
	}
	st := dynamo.New(f.client, f.table)
	if _, err := st.Update(t.Context(), store.Op{Kind: store.OpUpdate, Key: store.Key{PK: "BRD#" + f.brand.ID, SK: "SUB#" + subs[0].ID}, Set: set}); err != nil {
		t.Fatal(err)
	}
}
