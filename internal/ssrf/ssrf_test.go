package ssrf

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
)

// The IP predicate is tested on its own: no traffic goes to any of these
// addresses.
func TestBlockedIP(t *testing.T) {
	for _, tc := range []struct {
		ip       string
		blocked  bool // with allowLoopback false
		loopback bool // allowed when allowLoopback is true
	}{
		// Public addresses receivers may have.
		{"8.8.8.8", false, false},
		{"1.1.1.1", false, false},
		{"93.184.216.34", false, false},
		{"172.15.255.255", false, false},
		{"172.32.0.0", false, false},
		{"100.63.255.255", false, false},
		{"100.128.0.0", false, false},
		{"169.253.255.255", false, false},
		{"192.169.0.1", false, false},
		{"11.0.0.1", false, false},
		{"2606:4700:4700::1111", false, false},
		{"2001:4860:4860::8888", false, false},
		{"::ffff:8.8.8.8", false, false},
		{"64:ff9b::808:808", false, false}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", false, false},  // 6to4 of 8.8.8.8

		// Loopback.
		{"127.0.0.1", true, true},
		{"127.1.2.3", true, true},
		{"::1", true, true},
		{"::ffff:127.0.0.1", true, true},

		// Private.
		{"10.0.0.1", true, false},
		{"10.255.255.255", true, false},
		{"172.16.0.1", true, false},
		{"172.31.255.254", true, false},
		{"192.168.0.1", true, false},
		{"192.168.255.255", true, false},
		{"fc00::1", true, false},
		{"fd12:3456::1", true, false},
		{"::ffff:10.1.2.3", true, false},
		{"::ffff:192.168.1.1", true, false},

		// Link-local and cloud metadata.
		{"169.254.169.254", true, false},
		{"169.254.170.2", true, false}, // ECS task metadata
		{"169.254.0.1", true, false},
		{"::ffff:169.254.169.254", true, false},
		{"fe80::1", true, false},
		{"fe80::1%eth0", true, false},
		{"fd00:ec2::254", true, false},
		{"fd00:ec2::23", true, false},

		// Unspecified, multicast, CGNAT, reserved.
		{"0.0.0.0", true, false},
		{"0.1.2.3", true, false},
		{"::", true, false},
		{"::ffff:0.0.0.0", true, false},
		{"224.0.0.1", true, false},
		{"239.255.255.250", true, false},
		{"ff02::1", true, false},
		{"ff05::2", true, false},
		{"100.64.0.1", true, false},
		{"100.127.255.254", true, false},
		{"::ffff:100.64.0.1", true, false},
		{"240.0.0.1", true, false},
		{"255.255.255.255", true, false},
		{"198.18.0.1", true, false},
		{"192.0.0.8", true, false},
		{"fec0::1", true, false},
		{"::127.0.0.1", true, false}, // IPv4-compatible form

		// Ranges that carry an IPv4 address.
		{"64:ff9b::a9fe:a9fe", true, false}, // NAT64 of 169.254.169.254
		{"64:ff9b::a00:1", true, false},     // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", true, false},    // NAT64 of 127.0.0.1: never loopback this way
		{"64:ff9b:1::1", true, false},
		{"2002:a9fe:a9fe::1", true, false}, // 6to4 of 169.254.169.254
		{"2002:c0a8:101::1", true, false},  // 6to4 of 192.168.1.1
	} {
		ip := netip.MustParseAddr(tc.ip)
		if got := blockedIP(ip, false); got != tc.blocked {
			t.Errorf("blockedIP(%s, false) = %v, want %v", tc.ip, got, tc.blocked)
		}
		if got := blockedIP(ip, true); got != (tc.blocked && !tc.loopback) {
			t.Errorf("blockedIP(%s, true) = %v, want %v", tc.ip, got, tc.blocked && !tc.loopback)
		}
	}
	if !blockedIP(netip.Addr{}, true) {
		t.Error("the zero Addr must be blocked")
	}
}

func TestControlHook(t *testing.T) {
	for _, tc := range []struct {
		allowLoopback, loopbackOnly bool
		addr                        string
		ok                          bool
	}{
		{false, false, "93.184.216.34:443", true},
		{false, false, "[2606:4700::1]:443", true},
		{false, false, "127.0.0.1:443", false},
		{false, false, "[::1]:443", false},
		{false, false, "169.254.169.254:80", false},
		{false, false, "[::ffff:169.254.169.254]:80", false},
		{false, false, "[fd00:ec2::254]:80", false},
		{true, false, "127.0.0.1:8443", true},
		{true, false, "10.0.0.1:443", false},
		// Plain http: loopback only, and only when allowed.
		{true, true, "127.0.0.1:8080", true},
		{true, true, "[::1]:8080", true},
		{true, true, "93.184.216.34:80", false},
		{false, true, "127.0.0.1:8080", false},
		{false, true, "93.184.216.34:80", false},
		{false, false, "not-an-address", false},
	} {
		err := Control(tc.allowLoopback, tc.loopbackOnly)("tcp", tc.addr, nil)
		if (err == nil) != tc.ok {
			t.Errorf("control(%v, %v)(%s) = %v, want ok=%v", tc.allowLoopback, tc.loopbackOnly, tc.addr, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrBlocked) {
			t.Errorf("%s: refusal %v does not wrap ErrBlocked", tc.addr, err)
		}
	}
}

func TestCheckURL(t *testing.T) {
	for _, tc := range []struct {
		url                string
		cloud, local       bool // accepted with allowLoopback false / true
		messageMentionsURL bool
	}{
		{"https://example.com/webhooks", true, true, true},
		{"https://example.com:8443/hooks?x=1", true, true, true},
		{"https://hooks.example.com", true, true, true},
		{"HTTPS://Example.COM/x", true, true, true},
		{"https://93.184.216.34/x", true, true, true},
		{"https://[2606:4700::1]/x", true, true, true},
		{"http://example.com/webhooks", false, false, true},
		{"http://127.0.0.1:8080/hook", false, true, true},
		{"http://127.9.9.9:8080/hook", false, true, true},
		{"http://[::1]:8080/hook", false, true, true},
		{"http://localhost:8080/hook", false, true, true},
		{"http://app.localhost:8080/hook", false, true, true},
		{"https://localhost/hook", false, true, true},
		{"https://127.0.0.1/hook", false, true, true},
		{"https://10.0.0.5/hook", false, false, true},
		{"https://169.254.169.254/latest/meta-data/", false, false, true},
		{"https://[fd00:ec2::254]/", false, false, true},
		{"https://[::ffff:169.254.169.254]/", false, false, true},
		{"https://0.0.0.0/", false, false, true},
		{"http://0.0.0.0:8080/", false, false, true},
		{"http://10.0.0.5/hook", false, false, true},
		{"https://user:pass@example.com/", false, false, true},
		{"https://user@example.com/", false, false, true},
		{"http://user:pass@localhost:8080/", false, false, true},
		{"https:///path", false, false, true},
		{"https://:443/path", false, false, true},
		{"https://example.com:0/", false, false, true},
		{"https://example.com:70000/", false, false, true},
		{"https://example.com:port/", false, false, true},
		{"ftp://example.com/", false, false, true},
		{"file:///etc/passwd", false, false, true},
		{"gopher://localhost/", false, false, true},
		{"https:example.com", false, false, true},
		{"//example.com/hook", false, false, true},
		{"/relative", false, false, true},
		{"example.com/hook", false, false, true},
		{"", false, false, true},
		{" https://example.com/", false, false, true},
		{"https://exa mple.com/", false, false, true},
		{"https://example.com/" + strings.Repeat("a", MaxURLLength), false, false, true},
		// Characters a URL holds only percent-encoded: sent raw, they would
		// break the request line.
		{"https://example.com/p?x=a HTTP/1.0 X", false, false, true},
		{"http://127.0.0.1:8080/p?x=a HTTP/1.0 X", false, false, true},
		{"https://example.com/p?x=<script>", false, false, true},
		{"https://example.com/p?x=\"y\"", false, false, true},
		{"https://example.com/p?x=a\tb", false, false, true},
		{"https://example.com/p?x=a\x7fb", false, false, true},
		{"https://example.com/p?x=a\u00a0b", false, false, true},
		{"https://example.com/p?x={y}|z", false, false, true},
		{"https://example.com/p?x=a%20b%3Cc%3E&y=~-_.!$'()*+,;=:@", true, true, true},
		{"https://bücher.example/straße?q=ü", true, true, true},
		// Numeric hosts other than the standard forms: read as IPv4 by
		// browsers and resolvers, they exist to slip past address checks.
		{"https://2852039166/", false, false, true}, // 169.254.169.254 as one number
		{"https://0xa9fea9fe/", false, false, true}, // the same in hex
		{"https://0xA9.0xFE.0xA9.0xFE/", false, false, true},
		{"https://012.0.0.1/", false, false, true}, // octal 10.0.0.1
		{"https://127.1/", false, false, true},     // 127.0.0.1
		{"http://127.1:8080/", false, false, true}, // not loopback in a form we accept
		{"https://8.8.8/", false, false, true},
		{"https://example.123/", false, false, true},
		{"https://example.0x1f./", false, false, true},
		{"https://example.com1/", true, true, true}, // a name after all
		{"https://1example.com/", true, true, true},
		// Metadata services and private-network names.
		{"https://metadata.google.internal/computeMetadata/v1/", false, false, true},
		{"https://METADATA.GOOGLE.INTERNAL./", false, false, true},
		{"https://metadata/", false, false, true},
		{"https://metadata.goog/", false, false, true},
		{"https://hooks.corp.internal/", false, false, true},
		{"https://printer.local/", false, false, true},
		{"https://internal.example.com/", true, true, true},
	} {
		for _, allow := range []bool{false, true} {
			want := map[bool]bool{false: tc.cloud, true: tc.local}[allow]
			err := CheckURL(tc.url, allow)
			if (err == nil) != want {
				t.Errorf("CheckURL(%q, %v) = %v, want ok=%v", tc.url, allow, err, want)
				continue
			}
			if err == nil {
				continue
			}
			if tally.ErrorCode(err) != tally.ECodeValidation {
				t.Errorf("CheckURL(%q): code %q", tc.url, tally.ErrorCode(err))
			}
			if msg := tally.ErrorMessage(err); !strings.HasPrefix(msg, "url ") {
				t.Errorf("CheckURL(%q): message %q does not name url", tc.url, msg)
			}
		}
	}
	// A nil error is an untyped nil (not a nil *tally.Error in an interface).
	if err := CheckURL("https://example.com/", false); err != nil {
		t.Fatal(err)
	}
}
