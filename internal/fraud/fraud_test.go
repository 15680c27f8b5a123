package fraud_test

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/fraud"
)

func mustSet(t testing.TB, cidrs ...string) *fraud.IPSet {
	t.Helper()
	s, err := fraud.ParseIPSet(strings.NewReader(strings.Join(cidrs, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestIPSetContains(t *testing.T) {
	s := mustSet(t, "# a comment", "", "203.0.113.0/24", "198.51.100.7", "198.51.100.8/31",
		"10.0.0.0/8", "10.1.0.0/16", // nested: merged into one range
		"2001:db8::/32", "2001:db8:ffff::/48", "::ffff:192.0.2.128/121", "255.255.255.255/32", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff0/124")
	for addr, want := range map[string]bool{
		"203.0.113.0": true, "203.0.113.255": true, "203.0.112.255": false, "203.0.114.0": false,
		"198.51.100.6": false, "198.51.100.7": true, "198.51.100.8": true, "198.51.100.9": true, "198.51.100.10": false,
		"10.200.3.4": true, "11.0.0.0": false, "9.255.255.255": false,
		"2001:db8::1": true, "2001:db8:ffff:1::": true, "2001:db9::": false, "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff": false,
		"::ffff:203.0.113.9": true, // an IPv4-mapped IPv6 address is its IPv4 address
		"192.0.2.130":        true, // from the IPv4-mapped prefix
		"192.0.2.127":        false,
		"255.255.255.255":    true, "255.255.255.254": false,
		"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff": true, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffef": false,
		"0.0.0.0": false, "::": false,
	} {
		if got := s.Contains(netip.MustParseAddr(addr)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", addr, got, want)
		}
	}
	if s.Contains(netip.Addr{}) {
		t.Error("the zero Addr is in the set")
	}
	// Adjacent ranges merge: 198.51.100.7 and .8/31 are one range, 10/8
	// holds 10.1/16, 2001:db8::/32 holds 2001:db8:ffff::/48.
	if s.Len() != 7 {
		t.Errorf("Len = %d, want 7 disjoint ranges", s.Len())
	}
	for _, bad := range []string{"203.0.113.0/33", "not-an-ip", "2001:db8::/129", "10.0.0.1/8/2"} {
		if _, err := fraud.ParseIPSet(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseIPSet(%q) = nil error", bad)
		}
	}
}

// The set agrees with checking every prefix one by one, on random sets
// and addresses.
func TestIPSetMatchesLinearScan(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		var prefixes []netip.Prefix
		for range 1 + r.IntN(40) {
			var p netip.Prefix
			if r.IntN(2) == 0 {
				a := netip.AddrFrom4([4]byte{byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
				p = netip.PrefixFrom(a, 8+r.IntN(25)).Masked()
			} else {
				var b [16]byte
				b[0], b[1], b[2] = 0x20, 0x01, byte(r.IntN(4))
				b[3] = byte(r.IntN(256))
				p = netip.PrefixFrom(netip.AddrFrom16(b), 16+r.IntN(113)).Masked()
			}
			prefixes = append(prefixes, p)
		}
		s := fraud.NewIPSet(prefixes)
		for range 2000 {
			var a netip.Addr
			if r.IntN(2) == 0 {
				a = netip.AddrFrom4([4]byte{byte(r.IntN(4)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
			} else {
				var b [16]byte
				b[0], b[1], b[2], b[3] = 0x20, 0x01, byte(r.IntN(4)), byte(r.IntN(256))
				for i := 4; i < 16; i++ {
					b[i] = byte(r.IntN(256))
				}
				a = netip.AddrFrom16(b)
			}
			want := slices.ContainsFunc(prefixes, func(p netip.Prefix) bool { return p.Contains(a) })
			if got := s.Contains(a); got != want {
				t.Fatalf("Contains(%s) = %v, linear scan says %v; prefixes %v", a, got, want, prefixes)
			}
		}
	}
}

func TestDatacenterRanges(t *testing.T) {
	dc := fraud.Datacenters()
	if dc.Len() < 3000 {
		t.Errorf("%d datacenter ranges; the snapshot should have thousands", dc.Len())
	}
	// Addresses from the providers' own published lists, as of the snapshot.
	for _, ip := range []string{
		"3.5.140.1",           // AWS
		"52.94.76.10",         // AWS
		"2600:1f18:4a3f::1",   // AWS IPv6
		"34.64.0.1",           // Google Cloud
		"20.36.0.1",           // Azure
		"129.146.0.1",         // Oracle Cloud
		"164.90.128.1",        // DigitalOcean
		"2400:6180:10:200::1", // DigitalOcean IPv6
		"45.33.1.1",           // Linode
		"45.32.0.1",           // Vultr
		"::ffff:3.5.140.1",    // AWS, IPv4-mapped
	} {
		if !dc.Contains(netip.MustParseAddr(ip)) {
			t.Errorf("%s (a cloud provider's address) is not a datacenter address", ip)
		}
	}
	// Home and mobile networks, and addresses that are nobody's.
	for _, ip := range []string{
		"127.0.0.1", "10.1.2.3", "192.168.1.20", "100.64.0.1", "::1", "fe80::1",
		"24.48.0.1",    // a cable ISP
		"2a02:8108::1", // a German cable ISP
		"203.0.113.42", // documentation
		"2001:db8::42", // documentation
	} {
		if dc.Contains(netip.MustParseAddr(ip)) {
			t.Errorf("%s is counted as a datacenter address", ip)
		}
	}
}

func TestBotUserAgents(t *testing.T) {
	bots := fraud.Bots()
	if bots.Len() < 1000 {
		t.Errorf("%d bot patterns; the snapshot should have over a thousand", bots.Len())
	}
	for _, ua := range []string{
		"Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)",
		"Mozilla/5.0 (compatible; bingbot/2.0; +http://www.bing.com/bingbot.htm)",
		"facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
		"curl/8.5.0",
		"python-requests/2.31.0",
		"Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; GPTBot/1.2; +https://openai.com/gptbot)",
		"Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)",
		"Wget/1.21.4",
		"googlebot/2.1", // the lists write names in the case crawlers send them; a client may not
		"MOZILLA/5.0 (COMPATIBLE; BINGBOT/2.0)",
		"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) HeadlessChrome/120.0.0.0 Safari/537.36",
	} {
		if !bots.Match(ua) {
			t.Errorf("%q is not recognized as a bot", ua)
		}
	}
	for _, ua := range browsers {
		if bots.Match(ua) {
			t.Errorf("the browser %q is taken for a bot", ua)
		}
	}
}

var browsers = []string{
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
	"Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
	"Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Mobile/15E148 Safari/604.1",
	"Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0",
	"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 Edg/131.0.0.0",
	"Mozilla/5.0 (Linux; Android 14; SM-S918B) AppleWebKit/537.36 (KHTML, like Gecko) SamsungBrowser/25.0 Chrome/121.0.0.0 Mobile Safari/537.36",
	"Mozilla/5.0 (Linux; Android 13; Pixel 7 Build/TQ3A.230805.001; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/120.0.6099.230 Mobile Safari/537.36",
	"Mozilla/5.0 (iPad; CPU OS 16_6 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) CriOS/120.0.6099.119 Mobile/15E148 Safari/604.1",
}

func TestBotMatcherRules(t *testing.T) {
	m, err := fraud.ParseBotMatcher(strings.NewReader("# patterns\nGooglebot\\/\n(Ahrefs|Semrush)Bot\n[wW]get\n(?i)spider-x\n"))
	if err != nil {
		t.Fatal(err)
	}
	for ua, want := range map[string]bool{
		"Googlebot/2.1": true, "googlebot/2.1": true, "GOOGLEBOT/2.1": true, // any case
		"AhrefsBot/7": true, "SemrushBot": true, "MajesticBot": false,
		"Wget/1.2": true, "wget": true, "WGET": true,
		"a SPIDER-X b": true, "spider": false, "": false, "ab": false,
	} {
		if got := m.Match(ua); got != want {
			t.Errorf("Match(%q) = %v, want %v", ua, got, want)
		}
	}
	for _, bad := range []string{"(", ".*", "a|bcd", "[a-z]*bo"} {
		if _, err := fraud.ParseBotMatcher(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseBotMatcher(%q) = nil error; it has no literal to look for", bad)
		}
	}
}

func TestSignalsAndScore(t *testing.T) {
	blocked := mustSet(t, "198.51.100.0/24")
	browser := browsers[0]
	for _, c := range []struct {
		v     fraud.Visitor
		want  []string
		score int
	}{
		{fraud.Visitor{IP: netip.MustParseAddr("192.0.2.1"), UserAgent: browser}, []string{}, 0},
		{fraud.Visitor{IP: netip.MustParseAddr("3.5.140.1"), UserAgent: browser}, []string{tally.SignalDatacenterIP}, 50},
		{fraud.Visitor{IP: netip.MustParseAddr("198.51.100.3"), UserAgent: browser, Blocked: blocked}, []string{tally.SignalBlockedIP}, 100},
		{fraud.Visitor{IP: netip.MustParseAddr("192.0.2.1")}, []string{tally.SignalMissingUserAgent}, 40},
		{fraud.Visitor{IP: netip.MustParseAddr("192.0.2.1"), UserAgent: "curl/8.5.0"}, []string{tally.SignalBotUserAgent}, 80},
		{fraud.Visitor{IP: netip.MustParseAddr("192.0.2.1"), UserAgent: "googlebot/2.1"}, []string{tally.SignalBotUserAgent}, 80},
		{fraud.Visitor{IP: netip.MustParseAddr("192.0.2.1"), UserAgent: browser, Burst: true}, []string{tally.SignalIPVelocity}, 40},
		{fraud.Visitor{IP: netip.MustParseAddr("3.5.140.1"), Burst: true}, []string{tally.SignalDatacenterIP, tally.SignalMissingUserAgent, tally.SignalIPVelocity}, 100},
		{fraud.Visitor{IP: netip.MustParseAddr("3.5.140.1"), UserAgent: "Googlebot/2.1", Blocked: mustSet(t, "3.0.0.0/8"), Burst: true},
			[]string{tally.SignalDatacenterIP, tally.SignalBlockedIP, tally.SignalBotUserAgent, tally.SignalIPVelocity}, 100},
		{fraud.Visitor{UserAgent: browser}, []string{}, 0}, // no address known
	} {
		got := fraud.Signals(c.v)
		if !slices.Equal(got, c.want) || got == nil {
			t.Errorf("Signals(%+v) = %#v, want %v", c.v, got, c.want)
		}
		if s := fraud.Score(got); s != c.score {
			t.Errorf("Score(%v) = %d, want %d", got, s, c.score)
		}
	}
	if len(fraud.Weights) != 5 {
		t.Errorf("weights for %d signals, want the 5 signals", len(fraud.Weights))
	}
}

// BenchmarkDatacenterLookup is the datacenter check of one click: a binary
// search over every range of the snapshot.
func BenchmarkDatacenterLookup(b *testing.B) {
	dc := fraud.Datacenters()
	r := rand.New(rand.NewPCG(3, 4))
	addrs := make([]netip.Addr, 1024)
	for i := range addrs {
		if i%2 == 0 {
			addrs[i] = netip.AddrFrom4([4]byte{byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256)), byte(r.IntN(256))})
		} else {
			var a [16]byte
			a[0], a[1] = 0x2a, byte(r.IntN(256))
			for j := 2; j < 16; j++ {
				a[j] = byte(r.IntN(256))
			}
			addrs[i] = netip.AddrFrom16(a)
		}
	}
	for i := 0; b.Loop(); i++ {
		dc.Contains(addrs[i%len(addrs)])
	}
	b.ReportMetric(float64(dc.Len()), "ranges")
}

// BenchmarkBotUserAgent is the bot check of one click with a browser's
// User-Agent (the usual case: no pattern's literal is present).
func BenchmarkBotUserAgent(b *testing.B) {
	bots := fraud.Bots()
	for _, c := range []struct{ name, ua string }{{"browser", browsers[5]}, {"bot", "Mozilla/5.0 (compatible; AhrefsBot/7.0; +http://ahrefs.com/robot/)"}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				bots.Match(c.ua)
			}
			b.ReportMetric(float64(bots.Len()), "patterns")
		})
	}
}

func ExampleSignals() {
	v := fraud.Visitor{IP: netip.MustParseAddr("3.5.140.1"), UserAgent: ""}
	s := fraud.Signals(v)
	fmt.Println(s, fraud.Score(s))
	// Output: [datacenter_ip missing_user_agent] 90
}
