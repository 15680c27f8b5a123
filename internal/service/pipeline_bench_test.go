package service_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/procstat"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store/bolt"
)

// BenchmarkDrainBacklog measures how fast the local pipeline drains a
// backlog of due deliveries (as after a restart) to one healthy loopback
// receiver, on the embedded store with its fsync on commit:
//
//	go test -run X -bench DrainBacklog -benchtime 1x ./internal/service/
//
// It reports deliveries/s from the pipeline's start until the receiver got
// the last one. The backlog is 20,000 webhook deliveries; the pipeline
// has the local server's default 256 workers.
func BenchmarkDrainBacklog(b *testing.B) {
	const backlog = 20_000
	for range b.N {
		b.StopTimer()
		st, err := bolt.Open(b.TempDir() + "/tally.db")
		if err != nil {
			b.Fatal(err)
		}
		var got atomic.Int64
		rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
		ctx := context.Background()
		svc := servicetest.New(st, service.WithLoopbackReceivers())
		brand, err := svc.Identity.CreateBrand(ctx, "Acme")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Endpoints.CreateSubscription(ctx, brand.ID, endpoints.SubscriptionInput{URL: &rcv.URL, Events: []string{tally.EventPartnerApplied}}); err != nil {
			b.Fatal(err)
		}
		// The backlog: 20,000 events, fanned out, none attempted.
		inParallel(b, backlog, func(i int) error {
			_, err := svc.Partners.Apply(ctx, brand.ID, partners.ApplicationInput{Name: ptr("Pat"), Email: ptr(fmt.Sprintf("p%d@example.com", i))})
			return err
		})
		var ids []string
		for p := (records.ListParams{Limit: records.MaxLimit}); ; {
			page, cursor, err := svc.Events.Events(ctx, brand.ID, p)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range page {
				ids = append(ids, e.ID)
			}
			if p.Cursor = cursor; cursor == "" {
				break
			}
		}
		inParallel(b, len(ids), func(i int) error {
			_, err := svc.Webhooks.FanOut(ctx, ids[i])
			return err
		})
		b.StartTimer()

		start := time.Now()
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		// The server restarted over the backlog: its pipeline finds it.
		p := servicetest.New(st, service.WithLoopbackReceivers(),
			service.WithPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), 256, slog.New(slog.DiscardHandler))).Pipeline
		go func() { p.Run(pctx); close(done) }()
		for got.Load() < backlog {
			time.Sleep(time.Millisecond)
		}
		elapsed := time.Since(start)
		cancel()
		<-done
		b.ReportMetric(backlog/elapsed.Seconds(), "deliveries/s")
		b.StopTimer()
		rcv.Close()
		st.Close()
	}
}

// BenchmarkIngestWithWebhook measures what one webhook subscription adds
// to recording a conversion on the embedded store (with its fsync on
// commit), with the local pipeline delivering to a loopback receiver:
//
//	go test -run X -bench IngestWithWebhook -benchtime 1x -count 3 ./internal/service/
//
// It records 20,000 conversions on 64 goroutines, without a subscription
// and with one, and reports conversions/s (until the last delivery) and,
// per conversion, the bytes the process wrote to storage (Linux
// /proc) and its CPU time (the receiver's included), and how many
// connections the receiver took. The rates
// follow the machine's load; the bytes hardly do, and the commits' bytes
// are what bounds the rate once the CPU is not.
func BenchmarkIngestWithWebhook(b *testing.B) {
	const n = 20_000
	for _, subscribed := range []bool{false, true} {
		b.Run(map[bool]string{false: "subscriptions=0", true: "subscriptions=1"}[subscribed], func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				st, err := bolt.Open(b.TempDir() + "/tally.db")
				if err != nil {
					b.Fatal(err)
				}
				var got, conns atomic.Int64
				rcv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got.Add(1) }))
				rcv.Config.ConnState = func(_ net.Conn, state http.ConnState) {
					if state == http.StateNew {
						conns.Add(1)
					}
				}
				rcv.Start()
				ctx := context.Background()
				svc := servicetest.New(st, service.WithLoopbackReceivers(), service.WithOutboxOnlyForEndpoints(), // as the local server runs
					service.WithPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), 256, slog.New(slog.DiscardHandler)))
				brand, err := svc.Identity.CreateBrand(ctx, "Acme")
				if err != nil {
					b.Fatal(err)
				}
				offer, err := svc.Offers.CreateOffer(ctx, brand.ID, offers.OfferInput{Name: ptr("Shoes"), DestinationURL: ptr("https://shop.example/"),
					RevenueCents: ptr(int64(1000)), PayoutCents: ptr(int64(300)), Currency: ptr("USD")})
				if err != nil {
					b.Fatal(err)
				}
				partner, err := svc.Partners.Apply(ctx, brand.ID, partners.ApplicationInput{Name: ptr("Pat"), Email: ptr("pat@example.com")})
				if err == nil {
					_, err = svc.Partners.ApprovePartner(ctx, brand.ID, partner.ID)
				}
				if err == nil && subscribed {
					_, err = svc.Endpoints.CreateSubscription(ctx, brand.ID, endpoints.SubscriptionInput{URL: &rcv.URL, Events: []string{tally.EventConversionCreated}})
				}
				if err != nil {
					b.Fatal(err)
				}
				pctx, cancel := context.WithCancel(ctx)
				done := make(chan struct{})
				go func() { svc.Pipeline.Run(pctx); close(done) }()
				before, err := procstat.Read("self")
				if err != nil {
					b.Skip("no /proc:", err)
				}
				b.StartTimer()

				start := time.Now()
				inParallel(b, n, func(i int) error {
					_, _, err := svc.Conversions.RecordConversion(ctx, brand.ID, conversions.ConversionInput{OfferID: &offer.ID, PartnerID: &partner.ID, ExternalTxnID: ptr(fmt.Sprintf("txn-%d", i))})
					return err
				})
				for subscribed && got.Load() < n {
					time.Sleep(time.Millisecond)
				}
				elapsed := time.Since(start)
				b.StopTimer()
				cancel()
				<-done // the fan-outs and attempts under way are written
				after, err := procstat.Read("self")
				if err != nil {
					b.Fatal(err)
				}
				used := after.Sub(before)
				b.ReportMetric(n/elapsed.Seconds(), "conversions/s")
				b.ReportMetric(float64(used.Written)/n, "written-B/conversion")
				b.ReportMetric(float64(used.CPU.Microseconds())/n, "CPU-µs/conversion")
				if subscribed {
					b.ReportMetric(float64(conns.Load()), "receiver-connections")
				}
				rcv.Close()
				st.Close()
			}
		})
	}
}

// inParallel runs do(0) to do(n-1) on 64 goroutines, failing b on an error.
func inParallel(b *testing.B, n int, do func(i int) error) {
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 64 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := do(i); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
