package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Requests counted from many goroutines at once, each route's series made
// by whichever comes first, are all counted: none is lost to a series made
// twice.
func TestRequestsCountedFromManyGoroutines(t *testing.T) {
	m := New()
	const goroutines, each, routes = 8, 500, 5
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				m.RequestServed(fmt.Sprintf("/r%d", (g+i)%routes), "GET", 200, time.Millisecond)
			}
		})
	}
	wg.Wait()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for r := range routes {
		want := fmt.Sprintf(`tally_http_requests_total{code="200",method="GET",route="/r%d"} %d`, r, goroutines*each/routes)
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("no line %q in\n%s", want, body)
		}
	}
}

// What a tracking-link request adds to the server's work: its request
// and its click counted.
func BenchmarkClickObserved(b *testing.B) {
	m := New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.RequestServed("/c/{offerId}", "GET", 302, 3*time.Millisecond)
			m.ClickRecorded()
		}
	})
}
