package cli

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
)

// TestConnLimitUnderRacingClients runs many clients at once against a
// limit of two connections, with bodies: the limiter's bookkeeping
// (Accept, ConnState, Track) races with itself under -race, it never keeps
// more than its limit, and every client is served in the end, retrying
// when its connection was shed before its request arrived.
func TestConnLimitUnderRacingClients(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := newConnLimit(ln, 2)
	var mu sync.Mutex
	most := 0
	srv := &http.Server{
		Handler: l.Track(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			n, _ := io.Copy(io.Discard, r.Body)
			l.mu.Lock()
			open := len(l.conns)
			l.mu.Unlock()
			mu.Lock()
			most = max(most, open)
			mu.Unlock()
			w.Header().Set("Content-Length", "0")
			if n != 64<<10 {
				w.WriteHeader(http.StatusBadRequest)
			}
		})),
		ConnState:   l.ConnState,
		ConnContext: l.ConnContext,
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })

	body := bytes.Repeat([]byte("x"), 64<<10)
	var wg sync.WaitGroup
	for range 24 {
		wg.Go(func() {
			client := &http.Client{Transport: &http.Transport{MaxConnsPerHost: 1}}
			defer client.CloseIdleConnections()
			for try := 0; ; try++ {
				resp, err := client.Post("http://"+ln.Addr().String()+"/", "application/octet-stream", bytes.NewReader(body))
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode != 200 {
						t.Errorf("status %d: the body did not arrive whole", resp.StatusCode)
					}
					return
				}
				if try == 100 {
					t.Errorf("never served: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if most > 2 {
		t.Errorf("%d connections open at once, want at most 2", most)
	}
}
