package lambdafn_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/lambdafn/fanout"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/sqstest"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/testenv"
)

// lostItems is how many dropped items each benchmark run re-drives.
const lostItems = 1000

// BenchmarkReconcileLostEvents measures a reconciler run re-driving
// lostItems events whose messages were lost (each with one delivery, which
// the message carries), on DynamoDB Local and fauxqs: items re-driven per
// second, and per item the DynamoDB and SQS calls, request units and the
// Go CPU time (this process only: the emulators run apart), which give the
// figures for AWS (docs/aws.md, "The reconciler").
func BenchmarkReconcileLostEvents(b *testing.B) {
	benchmarkReconcile(b, func(b *testing.B, svc *service.Service, brandID, subID string) func(int) {
		return func(int) {
			if _, err := svc.Endpoints.SendTestEvent(b.Context(), brandID, subID); err != nil {
				b.Fatal(err)
			}
		}
	}, func(res fanout.ReconcilerResult) int { return res.Events }, false)
}

// BenchmarkReconcileLostConversions is BenchmarkReconcileLostEvents for
// new conversions whose stream records were lost, a FanoutDLQ message
// spanning their time: each conversion's conversion.created event is made
// and fanned out.
func BenchmarkReconcileLostConversions(b *testing.B) {
	benchmarkReconcile(b, func(b *testing.B, svc *service.Service, brandID, subID string) func(int) {
		o, err := svc.Offers.CreateOffer(b.Context(), brandID, offers.OfferInput{
			Name: ptr("Trail Shoes"), DestinationURL: ptr("https://shop.example.com/trail?click={click_id}"),
			RevenueCents: ptr[int64](4500), PayoutCents: ptr[int64](1200), Currency: ptr("EUR"),
			Approval: ptr(tally.ApprovalAuto), HoldHours: ptr(0),
		})
		if err != nil {
			b.Fatal(err)
		}
		applied, err := svc.Partners.Apply(b.Context(), brandID, partners.ApplicationInput{Name: ptr("Trail Deals"), Email: ptr("hello@traildeals.example")})
		if err != nil {
			b.Fatal(err)
		}
		partner, err := svc.Partners.ApprovePartner(b.Context(), brandID, applied.ID)
		if err != nil {
			b.Fatal(err)
		}
		return func(i int) {
			if _, _, err := svc.Conversions.RecordConversion(b.Context(), brandID, conversions.ConversionInput{
				OfferID: ptr(o.ID), PartnerID: ptr(partner.ID), ExternalTxnID: ptr(fmt.Sprint("order-", i)),
			}); err != nil {
				b.Fatal(err)
			}
		}
	}, func(res fanout.ReconcilerResult) int { return res.Conversions }, true)
}

// BenchmarkReconcileLostDeliveries is BenchmarkReconcileLostEvents for
// pending deliveries whose next attempt is overdue (their execution ended,
// their message was lost): each is queued again.
func BenchmarkReconcileLostDeliveries(b *testing.B) {
	benchmarkReconcile(b, func(b *testing.B, svc *service.Service, brandID, subID string) func(int) {
		return func(int) {
			evt, err := svc.Endpoints.SendTestEvent(b.Context(), brandID, subID)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := svc.Webhooks.FanOut(b.Context(), evt.ID); err != nil {
				b.Fatal(err)
			}
		}
	}, func(res fanout.ReconcilerResult) int { return res.Deliveries }, false)
}

// countingQueue counts SendMessageBatch calls.
type countingQueue struct {
	fanout.ReconcileQueue
	batches atomic.Int64
}

func (q *countingQueue) SendBatch(ctx context.Context, url string, msgs []sqsjson.Message) error {
	q.batches.Add(1)
	return q.ReconcileQueue.SendBatch(ctx, url, msgs)
}

// benchmarkReconcile runs the reconciler over lostItems items dropped by
// the function prepare returns for a brand with one subscription to
// conversion.created (its receiver is never called); with streamLost,
// FanoutDLQ holds a failed stream batch spanning the time they were made.
func benchmarkReconcile(b *testing.B, prepare func(*testing.B, *service.Service, string, string) func(int), redriven func(fanout.ReconcilerResult) int, streamLost bool) {
	endpoint := sqstest.Endpoint(b)
	var items, ddbCalls, sqsCalls int
	var rru, wru float64
	var cpu, wall time.Duration
	for range b.N {
		b.StopTimer()
		client, table := dynamotest.NewTable(b)
		meter := dynamotest.NewMeter(client, table)
		clock := testenv.NewClock(time.Now())
		svc := servicetest.New(dynamo.New(meter, table), service.OnAWS(), service.WithClock(clock.Now))
		brand, err := svc.Identity.CreateBrand(b.Context(), "Northwind Running")
		if err != nil {
			b.Fatal(err)
		}
		url := "https://hooks.example.com/tally"
		sub, err := svc.Endpoints.CreateSubscription(b.Context(), brand.ID, endpoints.SubscriptionInput{URL: &url, Events: []string{tally.EventConversionCreated}})
		if err != nil {
			b.Fatal(err)
		}
		lose := prepare(b, svc, brand.ID, sub.ID)
		from := time.Now()
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Go(func() {
				for i := w; i < lostItems; i += 8 {
					lose(i)
				}
			})
		}
		wg.Wait()
		sqsClient := sqstest.NewClient(endpoint)
		q, fanoutDLQ := sqstest.NewQueue(b, sqsClient, nil), sqstest.NewQueue(b, sqsClient, nil)
		if streamLost {
			info := fmt.Sprintf(`{"DDBStreamBatchInfo":{"approximateArrivalOfFirstRecord":%q,"approximateArrivalOfLastRecord":%q}}`,
				from.UTC().Format(time.RFC3339Nano), time.Now().UTC().Format(time.RFC3339Nano))
			if _, err := sqsClient.SendMessage(b.Context(), &sqs.SendMessageInput{QueueUrl: &fanoutDLQ.URL, MessageBody: &info}); err != nil {
				b.Fatal(err)
			}
		}
		sender := &countingQueue{ReconcileQueue: sqstest.NewSender(endpoint)}
		r := fanout.DefaultReconciler
		r.Backlog, r.Metrics = lostItems+1, emf.New(&testenv.SyncBuffer{})
		r.FanoutDLQ = &fanout.DLQ{Client: sqstest.NewSender(endpoint), URL: fanoutDLQ.URL}
		h := r.Handler(svc.Webhooks, sender, q.URL, slog.New(slog.DiscardHandler))
		clock.Set(clock.Now().Add(time.Hour))
		meter.Take()
		cpu0 := cpuTime()
		start := time.Now()
		b.StartTimer()
		res, err := h(b.Context(), events.EventBridgeEvent{})
		b.StopTimer()
		wall += time.Since(start)
		cpu += cpuTime() - cpu0
		if err != nil || redriven(res) < lostItems {
			b.Fatalf("reconciler: %+v, %v; want %d re-driven", res, err, lostItems)
		}
		u := meter.Take()
		for _, n := range u.Calls {
			ddbCalls += n
		}
		if n := u.Calls["items written"]; n > 0 {
			ddbCalls -= n // a count of items, not of calls
		}
		rru, wru = rru+u.RRU, wru+u.WRU
		sqsCalls += int(sender.batches.Load())
		items += redriven(res) // the set-up's own events too
	}
	n := float64(items)
	b.ReportMetric(n/wall.Seconds(), "items/s")
	b.ReportMetric(float64(ddbCalls)/n, "ddb-calls/item")
	b.ReportMetric(float64(sqsCalls)/n, "sqs-calls/item")
	b.ReportMetric(rru/n, "RRU/item")
	b.ReportMetric(wru/n, "WRU/item")
	b.ReportMetric(float64(cpu.Microseconds())/n, "cpu-µs/item")
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(fmt.Sprint("getrusage: ", err))
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
