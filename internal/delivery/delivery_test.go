package delivery

import (
	"bytes"
	"context"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/webhook"
)

// Every receiver in these tests listens on loopback; nothing leaves the
// machine.

var testBody = []byte(`{"id":"evt_01","type":"conversion.created","data":{"amount":12.5}}`)

func testRequest(url string) outgoing.Request {
	return outgoing.Request{URL: url, WebhookID: "wh_01TEST", Event: "conversion.created", Body: testBody, Secrets: []string{"s3cret"}}
}

func newSender(t testing.TB, o Options) *Sender {
	t.Helper()
	s := NewSender(o)
	t.Cleanup(s.CloseIdleConnections)
	return s
}

// trust makes s accept srv's self-signed certificate.
func trust(s *Sender, srv *httptest.Server) {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	s.tlsConfig.RootCAs = pool
}

// recorder is a receiver that keeps the requests it got.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
	body [][]byte
}

func (rec *recorder) handler(status int, answer string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r)
		rec.body = append(rec.body, b)
		rec.mu.Unlock()
		w.WriteHeader(status)
		io.WriteString(w, answer)
	}
}

func (rec *recorder) count() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

func TestSendHeadersAndFreshSignature(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec.handler(200, "ok"))
	defer srv.Close()

	// A clock that moves on between the two attempts: each is signed with
	// its own time.
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	var calls atomic.Int64
	clock := func() time.Time { return base.Add(time.Duration(calls.Add(1)-1) * 7 * time.Second) }
	s := newSender(t, Options{AllowLoopback: true, Now: clock})

	for i := range 2 {
		at := base.Add(time.Duration(i) * 7 * time.Second)
		a := s.Send(context.Background(), testRequest(srv.URL+"/hook"))
		if !a.Succeeded() || a.StatusCode != 200 || a.Error != "" || a.Response != "ok" {
			t.Fatalf("attempt %d = %+v", i, a)
		}
		if !a.At.Equal(at) {
			t.Errorf("attempt %d At = %v, want %v", i, a.At, at)
		}
		r, body := rec.reqs[i], rec.body[i]
		if r.Method != http.MethodPost || r.URL.Path != "/hook" {
			t.Errorf("got %s %s", r.Method, r.URL.Path)
		}
		for h, want := range map[string]string{
			"Content-Type":          "application/json",
			"User-Agent":            "Tally-Webhooks/1",
			webhook.EventHeader:     "conversion.created",
			webhook.WebhookIDHeader: "wh_01TEST",
			webhook.SignatureHeader: webhook.Sign("s3cret", at, testBody),
		} {
			if got := r.Header.Get(h); got != want {
				t.Errorf("attempt %d %s = %q, want %q", i, h, got, want)
			}
		}
		if _, ok := r.Header["Idempotency-Key"]; ok {
			t.Error("Idempotency-Key must not go on the wire")
		}
		if !bytes.Equal(body, testBody) {
			t.Errorf("body = %s", body)
		}
		if err := webhook.Verify("s3cret", r.Header.Get(webhook.SignatureHeader), body, webhook.DefaultTolerance); err != nil {
			t.Errorf("attempt %d: receiver cannot verify: %v", i, err)
		}
	}
	if rec.reqs[0].Header.Get(webhook.SignatureHeader) == rec.reqs[1].Header.Get(webhook.SignatureHeader) {
		t.Error("two attempts carry the same signature; each must be signed afresh")
	}
}

func TestSendWithoutSecretSendsNoSignature(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewServer(rec.handler(204, ""))
	defer srv.Close()
	s := newSender(t, Options{AllowLoopback: true})
	r := testRequest(srv.URL)
	r.Secrets = nil
	if a := s.Send(context.Background(), r); !a.Succeeded() || a.StatusCode != 204 {
		t.Fatalf("attempt = %+v", a)
	}
	if _, ok := rec.reqs[0].Header[webhook.SignatureHeader]; ok {
		t.Errorf("signature header sent without a secret: %q", rec.reqs[0].Header.Get(webhook.SignatureHeader))
	}
	if rec.reqs[0].Header.Get(webhook.WebhookIDHeader) != "wh_01TEST" {
		t.Error("webhook id missing")
	}
}

func TestSendOnly2xxSucceeds(t *testing.T) {
	s := newSender(t, Options{AllowLoopback: true})
	for _, tc := range []struct {
		status int
		ok     bool
	}{
		{200, true}, {201, true}, {202, true}, {204, true}, {299, true},
		{300, false}, {304, false}, {400, false}, {401, false}, {404, false}, {410, false},
		{429, false}, {500, false}, {502, false}, {503, false},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(tc.status)
			if tc.status != 204 && tc.status != 304 {
				io.WriteString(w, "status body")
			}
		}))
		a := s.Send(context.Background(), testRequest(srv.URL))
		srv.Close()
		if a.StatusCode != tc.status || a.Succeeded() != tc.ok || a.Error != "" {
			t.Errorf("status %d: attempt = %+v", tc.status, a)
		}
		if tc.status != 204 && tc.status != 304 && a.Response != "status body" {
			t.Errorf("status %d: response = %q", tc.status, a.Response)
		}
	}
}

func TestSendDoesNotFollowRedirects(t *testing.T) {
	for _, code := range []int{301, 302, 307, 308} {
		var followed atomic.Int64
		mux := http.NewServeMux()
		mux.HandleFunc("/hook", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/elsewhere", code)
		})
		mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) { followed.Add(1) })
		srv := httptest.NewServer(mux)
		s := newSender(t, Options{AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(srv.URL+"/hook"))
		srv.Close()
		if a.StatusCode != code || a.Succeeded() || a.Error != "" {
			t.Errorf("%d: attempt = %+v", code, a)
		}
		if followed.Load() != 0 {
			t.Errorf("%d: redirect was followed", code)
		}
	}
}

// sleeper answers after d, or gives up when the client goes away.
func sleeper(d time.Duration) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body) // then the server notices a hang-up
		select {
		case <-time.After(d):
			io.WriteString(w, "too late")
		case <-r.Context().Done():
		}
	}
}

// TestSendDefaultTimeout checks the spec's 10 s limit with the default
// options: a receiver that would answer after 15 s is cut off at 10 s.
func TestSendDefaultTimeout(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 10 s")
	}
	t.Parallel()
	srv := httptest.NewServer(sleeper(15 * time.Second))
	defer srv.Close()
	s := newSender(t, Options{AllowLoopback: true})
	if s.timeout != 10*time.Second {
		t.Fatalf("default timeout = %v", s.timeout)
	}
	a := s.Send(context.Background(), testRequest(srv.URL))
	if a.Error != tally.AttemptTimeout || a.StatusCode != 0 || a.Succeeded() {
		t.Fatalf("attempt = %+v", a)
	}
	if a.LatencyMs < 9500 || a.LatencyMs > 10500 {
		t.Errorf("LatencyMs = %d, want 10000 ± 500", a.LatencyMs)
	}
	t.Logf("cut off after %d ms", a.LatencyMs)
}

func TestSendShortTimeout(t *testing.T) {
	t.Parallel()
	const timeout = 300 * time.Millisecond
	within := func(t *testing.T, a tally.Attempt) {
		t.Helper()
		if a.LatencyMs < 300 || a.LatencyMs > 800 {
			t.Errorf("LatencyMs = %d, want about 300", a.LatencyMs)
		}
	}

	t.Run("no headers", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(sleeper(5 * time.Second))
		defer srv.Close()
		s := newSender(t, Options{Timeout: timeout, AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(srv.URL))
		if a.Error != tally.AttemptTimeout || a.StatusCode != 0 {
			t.Fatalf("attempt = %+v", a)
		}
		within(t, a)
	})

	t.Run("body stalls", func(t *testing.T) {
		// The whole response counts: headers and a first chunk arrive in
		// time, the rest never does.
		t.Parallel()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		}))
		defer srv.Close()
		s := newSender(t, Options{Timeout: timeout, AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(srv.URL))
		if a.Error != tally.AttemptTimeout || a.StatusCode != 200 || a.Response != "partial" {
			t.Fatalf("attempt = %+v", a)
		}
		if a.Succeeded() {
			t.Error("a 200 whose body did not arrive within the limit counts as a success; it must be retried")
		}
		within(t, a)
	})

	t.Run("tls handshake stalls", func(t *testing.T) {
		// A listener that accepts and never speaks: the handshake is
		// cut off by the same timeout, and that is a timeout, not tls.
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		s := newSender(t, Options{Timeout: timeout, AllowLoopback: true})
		a := s.Send(context.Background(), testRequest("https://"+ln.Addr().String()))
		if a.Error != tally.AttemptTimeout || a.StatusCode != 0 {
			t.Fatalf("attempt = %+v", a)
		}
		within(t, a)
	})

	t.Run("caller's deadline", func(t *testing.T) {
		t.Parallel()
		srv := httptest.NewServer(sleeper(5 * time.Second))
		defer srv.Close()
		s := newSender(t, Options{AllowLoopback: true})
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		a := s.Send(ctx, testRequest(srv.URL))
		if a.Error != tally.AttemptTimeout {
			t.Fatalf("attempt = %+v", a)
		}
		within(t, a)
	})
}

func TestSendLatency(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(120 * time.Millisecond)
		w.WriteHeader(500)
	}))
	defer srv.Close()
	s := newSender(t, Options{AllowLoopback: true})
	a := s.Send(context.Background(), testRequest(srv.URL))
	if a.StatusCode != 500 || a.LatencyMs < 120 || a.LatencyMs > 2000 {
		t.Fatalf("attempt = %+v", a)
	}
}

func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestSendConnectionRefused(t *testing.T) {
	s := newSender(t, Options{AllowLoopback: true})
	addr := closedPort(t)
	for _, u := range []string{"http://" + addr + "/hook", "https://" + addr + "/hook"} {
		a := s.Send(context.Background(), testRequest(u))
		if a.Error != tally.AttemptConnectionRefused || a.StatusCode != 0 || a.Succeeded() {
			t.Errorf("%s: attempt = %+v", u, a)
		}
	}
}

func TestSendDNS(t *testing.T) {
	// .invalid never resolves (RFC 2606); the lookup fails without any
	// traffic leaving the machine's resolver.
	s := newSender(t, Options{})
	a := s.Send(context.Background(), testRequest("https://receiver.tally-test.invalid/hook"))
	if a.Error != tally.AttemptDNS || a.StatusCode != 0 {
		t.Fatalf("attempt = %+v", a)
	}
}

func TestSendTLS(t *testing.T) {
	t.Run("https to a plain-http server", func(t *testing.T) {
		rec := &recorder{}
		srv := httptest.NewServer(rec.handler(200, "ok"))
		defer srv.Close()
		s := newSender(t, Options{AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(strings.Replace(srv.URL, "http://", "https://", 1)))
		if a.Error != tally.AttemptTLS || a.StatusCode != 0 {
			t.Fatalf("attempt = %+v", a)
		}
		if rec.count() != 0 {
			t.Error("receiver got a request")
		}
	})

	t.Run("untrusted certificate", func(t *testing.T) {
		rec := &recorder{}
		srv := httptest.NewTLSServer(rec.handler(200, "ok"))
		srv.Config.ErrorLog = quietLog()
		defer srv.Close()
		s := newSender(t, Options{AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(srv.URL))
		if a.Error != tally.AttemptTLS || a.StatusCode != 0 {
			t.Fatalf("attempt = %+v", a)
		}
		if rec.count() != 0 {
			t.Error("receiver got a request over an unverified connection")
		}
	})

	t.Run("name not in certificate", func(t *testing.T) {
		// The test certificate names 127.0.0.1, ::1 and example.com,
		// not localhost.
		rec := &recorder{}
		srv := httptest.NewTLSServer(rec.handler(200, "ok"))
		srv.Config.ErrorLog = quietLog()
		defer srv.Close()
		s := newSender(t, Options{AllowLoopback: true})
		trust(s, srv)
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		a := s.Send(context.Background(), testRequest("https://localhost:"+port))
		if a.Error != tally.AttemptTLS || rec.count() != 0 {
			t.Fatalf("attempt = %+v", a)
		}
	})

	for _, h2 := range []bool{false, true} {
		name := map[bool]string{false: "trusted certificate, HTTP/1.1", true: "trusted certificate, HTTP/2"}[h2]
		t.Run(name, func(t *testing.T) {
			rec := &recorder{}
			srv := httptest.NewUnstartedServer(rec.handler(201, "created"))
			srv.EnableHTTP2 = h2
			srv.StartTLS()
			defer srv.Close()
			s := newSender(t, Options{AllowLoopback: true})
			trust(s, srv)
			a := s.Send(context.Background(), testRequest(srv.URL))
			if !a.Succeeded() || a.StatusCode != 201 || a.Response != "created" || a.Error != "" {
				t.Fatalf("attempt = %+v", a)
			}
			r := rec.reqs[0]
			if want := map[bool]int{false: 1, true: 2}[h2]; r.ProtoMajor != want {
				t.Errorf("protocol = %s", r.Proto)
			}
			if r.Header.Get(webhook.SignatureHeader) == "" || !bytes.Equal(rec.body[0], testBody) {
				t.Error("request not delivered intact")
			}
		})
	}
}

func TestSendNetworkErrors(t *testing.T) {
	// Raw receivers that break the protocol.
	serve := func(t *testing.T, answer func(net.Conn)) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					answer(c)
				}()
			}
		}()
		return "http://" + ln.Addr().String()
	}
	readRequest := func(c net.Conn) {
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 4096)
		c.Read(buf)
	}
	for name, answer := range map[string]func(net.Conn){
		"closes at once":    func(c net.Conn) {},
		"closes unanswered": readRequest,
		"not http": func(c net.Conn) {
			readRequest(c)
			io.WriteString(c, "SSH-2.0-OpenSSH\r\n\r\n")
		},
		"cut short body": func(c net.Conn) {
			readRequest(c)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
		},
	} {
		t.Run(name, func(t *testing.T) {
			s := newSender(t, Options{Timeout: 3 * time.Second, AllowLoopback: true})
			a := s.Send(context.Background(), testRequest(serve(t, answer)))
			if a.Error != tally.AttemptNetwork {
				t.Fatalf("attempt = %+v", a)
			}
			if name == "cut short body" && (a.StatusCode != 200 || a.Response != "only this") {
				t.Errorf("attempt = %+v", a)
			}
		})
	}
}

func TestSendCallerCancelled(t *testing.T) {
	srv := httptest.NewServer(sleeper(5 * time.Second))
	defer srv.Close()
	s := newSender(t, Options{AllowLoopback: true})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	a := s.Send(ctx, testRequest(srv.URL))
	if a.Error != tally.AttemptNetwork || a.LatencyMs > 2000 {
		t.Fatalf("attempt = %+v", a)
	}
}

func TestSendKeepsFirst4KiB(t *testing.T) {
	t.Run("1 MiB body", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(502)
			w.Write(bytes.Repeat([]byte("x"), 1<<20))
		}))
		defer srv.Close()
		s := newSender(t, Options{AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(srv.URL))
		if a.StatusCode != 502 || a.Error != "" || len(a.Response) != 4096 || strings.Trim(a.Response, "x") != "" {
			t.Fatalf("status %d, error %q, %d bytes", a.StatusCode, a.Error, len(a.Response))
		}
	})

	t.Run("endless body", func(t *testing.T) {
		// 8 KiB arrive, then nothing more until the test ends: Send must
		// stop after 4 KiB, not wait for the rest or the timeout.
		release := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Write(bytes.Repeat([]byte("y"), 8<<10))
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}))
		defer srv.Close()
		defer close(release)
		s := newSender(t, Options{Timeout: 5 * time.Second, AllowLoopback: true})
		a := s.Send(context.Background(), testRequest(srv.URL))
		if a.StatusCode != 200 || a.Error != "" || len(a.Response) != 4096 || a.LatencyMs > 1000 {
			t.Fatalf("status %d, error %q, %d bytes, %d ms", a.StatusCode, a.Error, len(a.Response), a.LatencyMs)
		}
	})

	t.Run("made valid UTF-8", func(t *testing.T) {
		for _, tc := range []struct {
			name, body, want string
		}{
			{"invalid bytes", "ok \xff\xfe done", "ok \uFFFD done"},
			{"rune cut at 4 KiB", strings.Repeat("a", 4095) + "é and more", strings.Repeat("a", 4095)},
			{"multibyte text", "Zahlung erhalten – danke ✓", "Zahlung erhalten – danke ✓"},
		} {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(400)
				io.WriteString(w, tc.body)
			}))
			s := newSender(t, Options{AllowLoopback: true})
			a := s.Send(context.Background(), testRequest(srv.URL))
			srv.Close()
			if a.Response != tc.want || !utf8.ValidString(a.Response) {
				t.Errorf("%s: response = %q (%d bytes)", tc.name, a.Response, len(a.Response))
			}
		}
	})
}

func TestCleanText(t *testing.T) {
	for _, tc := range []struct {
		in   string
		max  int
		want string
	}{
		{"", 8, ""},
		{"abc", 8, "abc"},
		{"abc\xff", 8, "abc\uFFFD"},
		{"abcdefg\xe2", 8, "abcdefg"},                 // truncated inside a rune: dropped
		{"abcdef\xe2\x9c", 8, "abcdef"},               // two of three bytes
		{"abcde✓", 8, "abcde✓"},                       // exactly full, complete
		{"\xff\xff\xff\xff", 4, "\uFFFD"},             // one run, one replacement
		{"a\xffb\xffc\xffd\xff", 8, "a\uFFFDb\uFFFD"}, // grew past max: cut on a rune
	} {
		got := cleanText([]byte(tc.in), tc.max)
		if got != tc.want || !utf8.ValidString(got) || len(got) > tc.max {
			t.Errorf("cleanText(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
		}
	}
}

func TestSendReusesConnections(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		t.Run(map[bool]string{false: "http", true: "https"}[tlsOn], func(t *testing.T) {
			var opened, closed atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, "ok")
			}))
			srv.Config.ErrorLog = quietLog()
			srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				switch st {
				case http.StateNew:
					opened.Add(1)
				case http.StateClosed:
					closed.Add(1)
				}
			}
			s := newSender(t, Options{AllowLoopback: true})
			if tlsOn {
				srv.StartTLS()
				trust(s, srv)
			} else {
				srv.Start()
			}
			defer srv.Close()
			for i := range 20 {
				if a := s.Send(context.Background(), testRequest(srv.URL)); !a.Succeeded() {
					t.Fatalf("attempt %d = %+v", i, a)
				}
			}
			if n := opened.Load(); n != 1 {
				t.Errorf("20 sequential attempts used %d connections, want 1", n)
			}

			// Bursts of 16 in parallel: the pool keeps every connection a
			// burst needed (Go's default would keep 2 and close the rest),
			// so later bursts open none beyond the first burst's 16.
			const width = 16
			for burst := range 3 {
				var wg sync.WaitGroup
				for range width {
					wg.Go(func() {
						if a := s.Send(context.Background(), testRequest(srv.URL)); !a.Succeeded() {
							t.Errorf("burst %d: attempt = %+v", burst, a)
						}
					})
				}
				wg.Wait()
				time.Sleep(200 * time.Millisecond) // let dials still in flight land in the pool
			}
			if n := opened.Load(); n > width {
				t.Errorf("three bursts of %d opened %d connections, want at most %d", width, n, width)
			}
			if n := closed.Load(); n != 0 {
				t.Errorf("%d connections were closed instead of kept for reuse", n)
			}
		})
	}
}
