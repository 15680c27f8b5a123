package delivery

import (
	"context"
	"encoding/binary"
	"io"
	"log"
	"net"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ssrf"
)

// With AllowLoopback false (the cloud), loopback receivers are refused and
// never see a request; with true (the local server) they work.
func TestSendSSRFLoopback(t *testing.T) {
	rec := &recorder{}
	plain := httptest.NewServer(rec.handler(200, "ok"))
	defer plain.Close()
	tlsSrv := httptest.NewTLSServer(rec.handler(200, "ok"))
	tlsSrv.Config.ErrorLog = quietLog()
	defer tlsSrv.Close()
	_, tlsPort, _ := net.SplitHostPort(tlsSrv.Listener.Addr().String())

	cloud := newSender(t, Options{})
	trust(cloud, tlsSrv)
	for _, u := range []string{
		plain.URL,                               // http to loopback
		tlsSrv.URL,                              // https to 127.0.0.1
		"https://[::1]:" + tlsPort,              // https to ::1 (refused before any dial either way)
		"https://localhost:" + tlsPort,          // a name for loopback
		"https://[::ffff:127.0.0.1]:" + tlsPort, // mapped form
	} {
		a := cloud.Send(context.Background(), testRequest(u))
		if a.Error != tally.AttemptBlocked || a.StatusCode != 0 || a.Succeeded() {
			t.Errorf("cloud, %s: attempt = %+v", u, a)
		}
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("refused receivers got %d requests", n)
	}

	local := newSender(t, Options{AllowLoopback: true})
	trust(local, tlsSrv)
	for _, u := range []string{plain.URL, tlsSrv.URL} {
		if a := local.Send(context.Background(), testRequest(u)); !a.Succeeded() {
			t.Errorf("local, %s: attempt = %+v", u, a)
		}
	}
	if n := rec.count(); n != 2 {
		t.Fatalf("receivers got %d requests, want 2", n)
	}

	// Even locally, plain http goes to loopback only.
	a := local.Send(context.Background(), testRequest("http://example.com/hook"))
	if a.Error != tally.AttemptBlocked {
		t.Errorf("local, http to a public name: attempt = %+v", a)
	}
}

// TestSendSSRFResolvedAddress points a harmless-looking name at loopback
// through a fake DNS server (the DNS-rebinding case): the URL passes
// CheckURL, and the dial-time check of the resolved IP refuses it.
func TestSendSSRFResolvedAddress(t *testing.T) {
	rec := &recorder{}
	srv := httptest.NewTLSServer(rec.handler(200, "ok"))
	srv.Config.ErrorLog = quietLog()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	dns := fakeDNS(t, netip.MustParseAddr("127.0.0.1"))
	u := "https://receiver.rebind.test:" + port + "/hook"
	if err := ssrf.CheckURL(u, false); err != nil {
		t.Fatalf("the name itself looks fine: %v", err)
	}
	for _, allow := range []bool{false, true} {
		s := newSender(t, Options{AllowLoopback: allow})
		trust(s, srv)
		s.tlsDialer.Resolver = dns
		a := s.Send(context.Background(), testRequest(u))
		if !allow && a.Error != tally.AttemptBlocked {
			t.Errorf("cloud: attempt = %+v", a)
		}
		// Locally the dial goes through; the test certificate does not
		// name receiver.rebind.test, which proves the connection was made.
		if allow && a.Error != tally.AttemptTLS {
			t.Errorf("local: attempt = %+v", a)
		}
	}
	if n := rec.count(); n != 0 {
		t.Fatalf("receiver got %d requests", n)
	}
}

// fakeDNS serves A queries for any name with ip (and AAAA with no answer)
// on a loopback UDP port, and returns a resolver that asks only it.
func fakeDNS(t *testing.T, ip netip.Addr) *net.Resolver {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			if resp := dnsAnswer(buf[:n], ip); resp != nil {
				pc.WriteTo(resp, from)
			}
		}
	}()
	addr := pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "udp", addr)
		},
	}
}

// dnsAnswer builds the response to a one-question DNS query.
func dnsAnswer(q []byte, ip netip.Addr) []byte {
	if len(q) < 12 || binary.BigEndian.Uint16(q[4:6]) != 1 {
		return nil
	}
	i := 12
	for i < len(q) && q[i] != 0 {
		i += int(q[i]) + 1
	}
	if i+5 > len(q) {
		return nil
	}
	qEnd := i + 5 // zero label, type, class
	qtype := binary.BigEndian.Uint16(q[i+1 : i+3])
	resp := append([]byte{}, q[:qEnd]...)
	resp[2], resp[3] = 0x81, 0x80            // response, recursion desired and available, NOERROR
	binary.BigEndian.PutUint16(resp[8:], 0)  // NSCOUNT
	binary.BigEndian.PutUint16(resp[10:], 0) // ARCOUNT
	if qtype == 1 && ip.Is4() {
		binary.BigEndian.PutUint16(resp[6:], 1) // ANCOUNT
		a := ip.As4()
		resp = append(resp, 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 0, 0, 4, a[0], a[1], a[2], a[3])
	} else {
		binary.BigEndian.PutUint16(resp[6:], 0)
	}
	return resp
}

func quietLog() *log.Logger { return log.New(io.Discard, "", 0) }
