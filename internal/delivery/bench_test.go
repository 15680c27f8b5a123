package delivery

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkSend measures whole attempts (sign, POST, read the answer)
// against a loopback receiver that reads the body and answers 200 "ok".
// attempts/s = 1e9 / ns/op.
func BenchmarkSend(b *testing.B) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	for _, bc := range []struct {
		name  string
		tls   bool
		http2 bool
	}{
		{"http", false, false},
		{"https-h1", true, false},
		{"https-h2", true, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv := httptest.NewUnstartedServer(handler)
			srv.Config.ErrorLog = quietLog()
			s := newSender(b, Options{AllowLoopback: true})
			if bc.tls {
				srv.EnableHTTP2 = bc.http2
				srv.StartTLS()
				trust(s, srv)
			} else {
				srv.Start()
			}
			defer srv.Close()
			req := testRequest(srv.URL + "/hook")

			b.Run("sequential", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if a := s.Send(context.Background(), req); !a.Succeeded() {
						b.Fatalf("attempt = %+v", a)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attempts/s")
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if a := s.Send(context.Background(), req); !a.Succeeded() {
							b.Errorf("attempt = %+v", a)
							return
						}
					}
				})
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "attempts/s")
			})
		})
	}
}
