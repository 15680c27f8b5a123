package tracking_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/tracking"
)

// BenchmarkDrainBacklog measures how fast the local pipeline drains a
// backlog of due deliveries (as after a restart) to one healthy loopback
// receiver, on the embedded store with its fsync on commit:
//
//	go test -run X -bench DrainBacklog -benchtime 1x ./internal/tracking/
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
		svc := tracking.New(st, tracking.WithLoopbackReceivers())
		brand, err := svc.CreateBrand(ctx, "Acme")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := svc.CreateSubscription(ctx, brand.ID, tracking.SubscriptionInput{URL: &rcv.URL, Events: []string{tally.EventPartnerApplied}}); err != nil {
			b.Fatal(err)
		}
		// The backlog: 20,000 events, fanned out, none attempted.
		var wg sync.WaitGroup
		var next atomic.Int64
		for range 64 {
			wg.Go(func() {
				for i := next.Add(1); i <= backlog; i = next.Add(1) {
					_, err := svc.Apply(ctx, brand.ID, tracking.ApplicationInput{Name: ptr("Pat"), Email: ptr(fmt.Sprintf("p%d@example.com", i))})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		var ids []string
		for p := (tracking.ListParams{Limit: tracking.MaxLimit}); ; {
			page, cursor, err := svc.Events(ctx, brand.ID, p)
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
		next.Store(0)
		for range 64 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(len(ids)); i = next.Add(1) {
					if _, err := svc.FanOut(ctx, ids[i-1]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StartTimer()

		start := time.Now()
		pctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		p := svc.NewPipeline(delivery.NewSender(delivery.Options{AllowLoopback: true}), 256, slog.New(slog.DiscardHandler))
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
