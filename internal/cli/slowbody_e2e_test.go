package cli_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"
)

// TestSlowBodiesCannotLockClientsOut opens more connections than the
// server keeps (TALLY_MAX_CONNECTIONS=8), each a request whose body
// trickles in: the headers say Content-Length: 100000, then a byte comes
// now and then. Each is let in, and a new client must still be served while
// they hold, before the server's read timeout (15 s) could free any of
// them: the server makes room by closing the connection that has been
// receiving its body longest, as it closes the one idle longest.
func TestSlowBodiesCannotLockClientsOut(t *testing.T) {
	t.Parallel()
	s := serve(t, env("TALLY_MAX_CONNECTIONS=8", "TALLY_APPLICATION_RATE_LIMIT=1000"), "--data", t.TempDir())

	// Everything below must happen before the first slow request's read
	// timeout (15 s) could free a connection.
	deadline := time.Now().Add(10 * time.Second)
	var slow []net.Conn
	defer func() {
		for _, c := range slow {
			c.Close()
		}
	}()
	for i := range 9 {
		conn, err := net.Dial("tcp", s.addr)
		if err != nil {
			t.Fatal(err)
		}
		slow = append(slow, conn)
		_ = conn.SetDeadline(deadline)
		// Expect: 100-continue makes the server say when it starts reading
		// the body: by then the request is in progress.
		if _, err := fmt.Fprintf(conn, "POST /api/public/brands/brd_01jd0000000000000000000000/applications HTTP/1.1\r\n"+
			"Host: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\nExpect: 100-continue\r\n\r\n", s.addr); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusContinue {
			t.Fatalf("slow request %d: %v %v, want 100 Continue (room made by closing the oldest)", i+1, resp, err)
		}
		if _, err := conn.Write([]byte("{")); err != nil {
			t.Fatal(err)
		}
	}
	trickle(t, 500*time.Millisecond, slow...)

	client := &http.Client{Timeout: time.Until(deadline), Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + s.addr + "/api/public/webhook-events")
	if err != nil {
		t.Fatalf("a new client while slow bodies hold every connection: %v", err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("a new client while slow bodies hold every connection: %d", resp.StatusCode)
	}

	// The room was made by closing the slow requests that began first (for
	// the ninth, then for the client); the last one is still open, waiting
	// for its body.
	for i, c := range slow[:2] {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second)) // closed already: no waiting
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isConnReset(err) {
			t.Errorf("slow request %d: read %v, want its connection closed by the server", i+1, err)
		}
	}
	last := slow[len(slow)-1]
	_ = last.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if n, err := last.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the newest slow request: read %d bytes, %v; want it still open and unanswered", n, err)
	}
}

// trickle writes a byte to each of conns every period until the test ends:
// bodies that keep arriving and are never whole.
func trickle(t *testing.T, every time.Duration, conns ...net.Conn) {
	stop := make(chan struct{})
	var trickling sync.WaitGroup
	t.Cleanup(func() { close(stop); trickling.Wait() })
	trickling.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for _, c := range conns {
					_, _ = c.Write([]byte(" "))
				}
			}
		}
	})
}
