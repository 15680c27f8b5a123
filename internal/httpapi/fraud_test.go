package httpapi_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog/schemacheck"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// behindProxy is an API whose clients come through a proxy on loopback, so
// that a test can click from any address with X-Forwarded-For.
func behindProxy() httpapi.Config {
	return httpapi.Config{RateLimit: 100_000, TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
}

// clickFrom follows the link from ip with the User-Agent ua ("" sends none).
func (e *env) clickFrom(link, ip, ua string) response {
	e.t.Helper()
	return e.visit(link, map[string]string{"X-Forwarded-For": ip, "User-Agent": ua})
}

// events returns the brand's events with the given name, decoded, after
// checking each against the catalog.
func events[T any](t *testing.T, svc *service.Service, brandID, name string) []T {
	t.Helper()
	var out []T
	p := records.ListParams{Limit: records.MaxLimit}
	for {
		evts, next, err := svc.Events.Events(context.Background(), brandID, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evts {
			if e.Event != name {
				continue
			}
			raw, err := json.Marshal(e)
			if err != nil {
				t.Fatal(err)
			}
			if err := schemacheck.ValidateEnvelope(raw); err != nil {
				t.Errorf("%s event refused by the catalog: %v\n%s", name, err, raw)
			}
			var d T
			if err := json.Unmarshal(e.Data, &d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		}
		if next == "" {
			return out
		}
		p.Cursor = next
	}
}

func TestClicksAreScoredForFraud(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.MidMinute() // the eleven clicks of a minute below share one
		e := newEnv(t, st, behindProxy(), service.WithClock(clock.Now))
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		partnerID := e.activePartner(brandID, key)
		link := "/c/" + offerID + "?pid=" + partnerID
		e.must(201, e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": "198.51.100.0/24", "note": "click farm"}))

		for _, c := range []struct {
			ip, ua  string
			signals []string
			score   int
		}{
			{"192.0.2.10", browserUA, []string{}, 0},
			{"3.5.140.1", browserUA, []string{"datacenter_ip"}, 50},         // AWS
			{"2600:1f18:4a3f::1", browserUA, []string{"datacenter_ip"}, 50}, // AWS, IPv6
			{"198.51.100.77", browserUA, []string{"blocked_ip"}, 100},       // the brand's blocklist
			{"192.0.2.11", "curl/8.5.0", []string{"bot_user_agent"}, 80},    // a crawler list entry
			{"192.0.2.12", "", []string{"missing_user_agent"}, 40},          // no User-Agent at all
			{"3.5.140.2", "", []string{"datacenter_ip", "missing_user_agent"}, 90},
		} {
			r := e.must(302, e.clickFrom(link, c.ip, c.ua))
			var click tally.Click
			e.must(200, e.call("GET", "/api/v1/clicks/"+clickIDOf(t, r), key, nil)).decode(t, &click)
			if click.IP != netip.MustParseAddr(c.ip).String() || !slices.Equal(click.FraudSignals, c.signals) || click.FraudScore != c.score {
				t.Errorf("click from %s (%q): ip %s, signals %v, score %d; want signals %v, score %d",
					c.ip, c.ua, click.IP, click.FraudSignals, click.FraudScore, c.signals, c.score)
			}
		}
		// The 11th click from one address on one offer within the minute.
		for i := range 11 {
			r := e.must(302, e.clickFrom(link, "192.0.2.99", browserUA))
			var click tally.Click
			e.must(200, e.call("GET", "/api/v1/clicks/"+clickIDOf(t, r), key, nil)).decode(t, &click)
			if burst := slices.Contains(click.FraudSignals, "ip_velocity"); burst != (i == 10) {
				t.Errorf("click %d from one address: signals %v", i+1, click.FraudSignals)
			}
		}

		// High-risk clicks (score > 70): the blocked one, the bot and the
		// datacenter one without a User-Agent.
		highRisk := events[tally.FraudEventData](t, e.svc, brandID, tally.EventFraudHighRisk)
		scores := []int{}
		for _, d := range highRisk {
			scores = append(scores, d.Score)
			if d.Threshold != 70 || d.OfferID != offerID || d.PartnerID != partnerID || d.Score <= 70 {
				t.Errorf("fraud.high_risk %+v", d)
			}
		}
		slices.Sort(scores)
		if !slices.Equal(scores, []int{80, 90, 100}) {
			t.Errorf("fraud.high_risk scores %v, want 80, 90 and 100", scores)
		}
		risky := e.listAll("/api/v1/clicks?minScore=71", key)
		var report struct{ Data []tally.ReportRow }
		e.must(200, e.call("GET", "/api/v1/reports", key, nil)).decode(t, &report)
		if len(report.Data) != 1 || report.Data[0].HighRiskClicks != int64(len(risky)) || report.Data[0].Clicks != int64(len(e.listAll("/api/v1/clicks", key))) ||
			len(risky) != 3 || report.Data[0].Clicks != 18 {
			t.Errorf("report %+v; %d clicks over 70 listed, want 18 clicks of which 3 high-risk", report.Data, len(risky))
		}

		// A lower threshold makes a datacenter click high-risk from now on.
		clock.Advance(time.Second) // events list newest first, by time
		e.must(200, e.call("PUT", "/api/v1/fraud/settings", key, map[string]any{"threshold": 40,
			"autoBan": map[string]any{"enabled": false, "highRiskClicks": 20, "windowHours": 24}}))
		e.must(302, e.clickFrom(link, "3.5.140.3", browserUA))
		if got := events[tally.FraudEventData](t, e.svc, brandID, tally.EventFraudHighRisk); len(got) != 4 || got[0].Threshold != 40 || got[0].Score != 50 {
			t.Errorf("after lowering the threshold: %+v", got)
		}
	})
}

// clickDest makes an offer whose destination carries the click id.
var clickDest = map[string]any{"destinationUrl": "https://shop.example/p?c={click_id}"}

func clickIDOf(t *testing.T, r response) string {
	t.Helper()
	loc := r.header.Get("Location")
	const prefix = "https://shop.example/p?c="
	if len(loc) <= len(prefix) || loc[:len(prefix)] != prefix {
		t.Fatalf("Location %q carries no click id", loc)
	}
	return loc[len(prefix):]
}

// The client address is the connection's peer unless the peer is a
// trusted proxy: then X-Forwarded-For's last address that is not a trusted
// proxy.
func TestClickAddressTrustsOnlyConfiguredProxies(t *testing.T) {
	for _, c := range []struct {
		name    string
		trusted []string
		xff     []string
		want    string
	}{
		{"no proxy configured: the header is ignored", nil, []string{"3.5.140.1"}, "127.0.0.1"},
		{"an untrusted peer: the header is ignored", []string{"10.0.0.0/8"}, []string{"3.5.140.1"}, "127.0.0.1"},
		{"a trusted peer: the address it saw", []string{"127.0.0.1"}, []string{"3.5.140.1"}, "3.5.140.1"},
		{"a client-written hop before it does not count", []string{"127.0.0.1"}, []string{"203.0.113.5, 3.5.140.1"}, "3.5.140.1"},
		{"trusted hops are skipped", []string{"127.0.0.1", "10.0.0.0/8"}, []string{"203.0.113.5, 3.5.140.1, 10.1.1.1"}, "3.5.140.1"},
		{"several headers are one list", []string{"127.0.0.1"}, []string{"203.0.113.5", "2001:db8::7"}, "2001:db8::7"},
		{"a malformed header: the peer", []string{"127.0.0.1"}, []string{"3.5.140.1, not-an-ip"}, "127.0.0.1"},
		{"only trusted hops: the peer", []string{"127.0.0.1", "10.0.0.0/8"}, []string{"10.2.2.2"}, "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := httpapi.Config{}
			for _, p := range c.trusted {
				pf, err := netip.ParsePrefix(p)
				if err != nil {
					pf = netip.PrefixFrom(netip.MustParseAddr(p), 32)
				}
				cfg.TrustedProxies = append(cfg.TrustedProxies, pf)
			}
			e := newEnv(t, testenv.Bolt(t), cfg)
			brandID, key := e.brand()
			offerID := e.offer(key, clickDest)
			partnerID := e.activePartner(brandID, key)
			req := e.srvRequest("GET", "/c/"+offerID+"?pid="+partnerID)
			req.Header.Set("User-Agent", browserUA)
			for _, v := range c.xff {
				req.Header.Add("X-Forwarded-For", v)
			}
			r := e.doNoRedirect(req)
			var click tally.Click
			e.must(200, e.call("GET", "/api/v1/clicks/"+clickIDOf(t, r), key, nil)).decode(t, &click)
			if click.IP != c.want {
				t.Errorf("click IP %s, want %s", click.IP, c.want)
			}
			if dc := slices.Contains(click.FraudSignals, "datacenter_ip"); dc != (c.want == "3.5.140.1") {
				t.Errorf("signals %v for a click from %s", click.FraudSignals, c.want)
			}
		})
	}
}

func TestFraudSettingsAndBlockedIPs(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		_, key := e.brand()
		_, otherKey := e.brand()

		var settings tally.FraudSettings
		e.must(200, e.call("GET", "/api/v1/fraud/settings", key, nil)).decode(t, &settings)
		if settings != tally.DefaultFraudSettings || settings.Threshold != 70 || settings.AutoBan.Enabled || settings.AutoBan.HighRiskClicks != 20 || settings.AutoBan.WindowHours != 24 {
			t.Errorf("default settings %+v", settings)
		}
		good := map[string]any{"threshold": 60, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 5, "windowHours": 48}}
		for _, bad := range []map[string]any{
			{},
			{"threshold": 60},
			{"threshold": 101, "autoBan": good["autoBan"]},
			{"threshold": -1, "autoBan": good["autoBan"]},
			{"threshold": 60, "autoBan": map[string]any{"highRiskClicks": 5, "windowHours": 48}},
			{"threshold": 60, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 0, "windowHours": 48}},
			{"threshold": 60, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 5, "windowHours": 721}},
			{"threshold": 60, "autoBan": map[string]any{"enabled": true, "highRiskClicks": 5}},
			{"threshold": 60, "autoBan": map[string]any{"enabled": "yes", "highRiskClicks": 5, "windowHours": 48}},
			{"threshold": 60.5, "autoBan": good["autoBan"]},
			{"threshold": 60, "autoBan": good["autoBan"], "strict": true},
		} {
			if r := e.call("PUT", "/api/v1/fraud/settings", key, bad); r.status != 422 || r.errorCode() != "validation_error" {
				t.Errorf("PUT %v: %d %s, want 422", bad, r.status, r.body)
			}
		}
		e.must(200, e.call("PUT", "/api/v1/fraud/settings", key, good)).decode(t, &settings)
		var again, other tally.FraudSettings
		e.must(200, e.call("GET", "/api/v1/fraud/settings", key, nil)).decode(t, &again)
		e.must(200, e.call("GET", "/api/v1/fraud/settings", otherKey, nil)).decode(t, &other)
		want := tally.FraudSettings{Threshold: 60, AutoBan: tally.AutoBan{Enabled: true, HighRiskClicks: 5, WindowHours: 48}}
		if settings != want || again != want || other != tally.DefaultFraudSettings {
			t.Errorf("settings %+v, read back %+v, another brand's %+v", settings, again, other)
		}

		var b tally.BlockedIP
		e.must(201, e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": "203.0.113.77/24", "note": "scraper"})).decode(t, &b)
		if b.CIDR != "203.0.113.0/24" || b.Note != "scraper" || len(b.ID) < 4 || b.ID[:4] != "bip_" {
			t.Errorf("blocked %+v, want the range written canonically", b)
		}
		single := e.must(201, e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": "2001:db8::1"})).field(t, "cidr")
		if single != "2001:db8::1/128" {
			t.Errorf("a single address is blocked as %s", single)
		}
		if r := e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": "203.0.113.0/24"}); r.status != 409 || r.errorCode() != "conflict" {
			t.Errorf("blocking a range again: %d %s", r.status, r.body)
		}
		for _, bad := range []map[string]any{{}, {"cidr": "203.0.113.0/33"}, {"cidr": "example.com"}, {"cidr": ""}, {"cidr": "10.0.0.0/8", "note": string(make([]byte, 501))}, {"cidr": "10.0.0.0/8", "why": "x"},
			{"cidr": "fe80::1%eth0"}, {"cidr": "::ffff:198.51.100.0/80"}} { // a zone, a mapped range wider than IPv4: would never match
			if r := e.call("POST", "/api/v1/fraud/blocked-ips", key, bad); r.status != 422 {
				t.Errorf("POST %v: %d %s, want 422", bad, r.status, r.body)
			}
		}
		e.must(201, e.call("POST", "/api/v1/fraud/blocked-ips", otherKey, map[string]any{"cidr": "203.0.113.0/24"})) // another brand's own list
		if got := e.listAll("/api/v1/fraud/blocked-ips", key); len(got) != 2 || got[1] != b.ID {
			t.Errorf("blocked ranges %v, want 2, newest first", got)
		}
		if r := e.call("DELETE", "/api/v1/fraud/blocked-ips/"+b.ID, otherKey, nil); r.status != 404 {
			t.Errorf("another brand deletes the range: %d", r.status)
		}
		e.must(200, e.call("DELETE", "/api/v1/fraud/blocked-ips/"+b.ID, key, nil))
		e.must(404, e.call("DELETE", "/api/v1/fraud/blocked-ips/"+b.ID, key, nil))
		e.must(201, e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": "203.0.113.0/24"})) // once unblocked, again
	})
}

// A brand blocks at most 1000 ranges, exactly, under concurrent requests.
func TestBlockedIPLimit(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{RateLimit: 100_000})
	brandID, key := e.brand()
	for i := range 990 {
		cidr := fmt.Sprintf("10.%d.%d.0/24", i/256, i%256)
		if _, err := e.svc.Clicks.BlockIP(context.Background(), brandID, clicks.BlockedIPInput{CIDR: &cidr}); err != nil {
			t.Fatal(err)
		}
	}
	_, statuses := e.raceCalls(30, "POST", "/api/v1/fraud/blocked-ips", key, func(i int) any {
		return map[string]any{"cidr": fmt.Sprintf("172.16.%d.0/24", i)}
	})
	if statuses[201] != 10 || statuses[409] != 20 {
		t.Errorf("statuses %v, want 10 created and 20 refused", statuses)
	}
	if n := len(e.listAll("/api/v1/fraud/blocked-ips", key)); n != 1000 {
		t.Errorf("%d ranges blocked, want 1000", n)
	}
}

// The auto-ban rule bans a partner once, with the click that brings its
// high-risk clicks in the window to the limit, however many race.
func TestAutoBanFiresExactlyOnce(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, behindProxy())
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		partnerID := e.activePartner(brandID, key)
		bystander := e.activePartner(brandID, key)
		e.must(200, e.call("PUT", "/api/v1/fraud/settings", key, map[string]any{"threshold": 70,
			"autoBan": map[string]any{"enabled": true, "highRiskClicks": 5, "windowHours": 24}}))
		// Clean clicks do not count.
		for i := range 3 {
			e.must(302, e.clickFrom("/c/"+offerID+"?pid="+partnerID, fmt.Sprint("192.0.2.", i), browserUA))
		}

		const n = 30
		answers := make([]response, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Go(func() {
				<-start
				var err error
				answers[i], err = e.tryVisit("/c/"+offerID+"?pid="+partnerID, map[string]string{"X-Forwarded-For": fmt.Sprint("192.0.2.", 100+i), "User-Agent": "curl/8.5.0"})
				if err != nil {
					t.Error(err)
				}
			})
		}
		close(start)
		wg.Wait()
		statuses := map[int]int{}
		for _, a := range answers {
			statuses[a.status]++
		}
		if statuses[302] != 5 || statuses[404] != n-5 {
			t.Errorf("statuses %v: want the 5 high-risk clicks up to the limit redirected, the rest refused", statuses)
		}
		bans := events[tally.PartnerEventData](t, e.svc, brandID, tally.EventPartnerBanned)
		if len(bans) != 1 || bans[0].PartnerID != partnerID || bans[0].Reason != "automation" || bans[0].Rule != "fraud.high_risk_clicks" || bans[0].PreviousStatus != "active" {
			t.Errorf("partner.banned events %+v, want exactly one, by the rule", bans)
		}
		if got := events[tally.FraudEventData](t, e.svc, brandID, tally.EventFraudHighRisk); len(got) != 5 {
			t.Errorf("%d fraud.high_risk events, want one per stored high-risk click (5)", len(got))
		}
		var p tally.Partner
		e.must(200, e.call("GET", "/api/v1/partners/"+partnerID, key, nil)).decode(t, &p)
		if p.Status != tally.PartnerBanned {
			t.Errorf("partner is %s, want banned", p.Status)
		}
		if got := e.listAll("/api/v1/clicks?partnerId="+partnerID, key); len(got) != 8 {
			t.Errorf("%d clicks stored, want 3 clean and 5 high-risk", len(got))
		}
		// Its links are dead now; another partner's are not; a manual ban
		// says so.
		e.must(404, e.clickFrom("/c/"+offerID+"?pid="+partnerID, "192.0.2.250", browserUA))
		e.must(302, e.clickFrom("/c/"+offerID+"?pid="+bystander, "192.0.2.250", browserUA))
		e.must(200, e.call("POST", "/api/v1/partners/"+bystander+"/ban", key, nil))
		bans = events[tally.PartnerEventData](t, e.svc, brandID, tally.EventPartnerBanned)
		if len(bans) != 2 || bans[0].Reason != "manual" || bans[0].Rule != "" {
			t.Errorf("after a manual ban: %+v", bans)
		}
	})
}

// The rule counts the partner's high-risk clicks within the window's hours,
// not those before it.
func TestAutoBanWindow(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		day := testenv.Start().Truncate(24 * time.Hour)
		clock := testenv.NewClock(day.Add(8*time.Hour + 30*time.Minute))
		e := newEnv(t, st, behindProxy(), service.WithClock(clock.Now))
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		partnerID := e.activePartner(brandID, key)
		e.must(200, e.call("PUT", "/api/v1/fraud/settings", key, map[string]any{"threshold": 70,
			"autoBan": map[string]any{"enabled": true, "highRiskClicks": 4, "windowHours": 3}}))
		link := "/c/" + offerID + "?pid=" + partnerID
		bot := func(ip string) response { return e.clickFrom(link, ip, "python-requests/2.31") }

		e.must(302, bot("192.0.2.1")) // 08:30, outside the window by 11:xx
		clock.Set(day.Add(9*time.Hour + 10*time.Minute))
		e.must(302, bot("192.0.2.2")) // 09:10
		clock.Set(day.Add(10*time.Hour + 50*time.Minute))
		e.must(302, bot("192.0.2.3")) // 10:50
		clock.Set(day.Add(11*time.Hour + 5*time.Minute))
		// At 11:05 the window holds the hours 09, 10 and 11: two clicks so far.
		e.must(302, bot("192.0.2.4"))
		if bans := events[tally.PartnerEventData](t, e.svc, brandID, tally.EventPartnerBanned); len(bans) != 0 {
			t.Fatalf("banned with 3 high-risk clicks in the window: %+v", bans)
		}
		e.must(302, bot("192.0.2.5")) // the 4th in the window
		if bans := events[tally.PartnerEventData](t, e.svc, brandID, tally.EventPartnerBanned); len(bans) != 1 {
			t.Fatalf("partner.banned events %+v, want one at the 4th high-risk click in the window", bans)
		}
		e.must(404, bot("192.0.2.6"))
	})
}

// Blocking every address (0.0.0.0/0, ::/0) would score every click 100 and,
// with the auto-ban rule on, ban every partner: a range wider than an IPv4
// /8 or an IPv6 /12 (what IANA hands a regional registry) answers 422
// naming cidr and is not stored, so clicks keep their scores.
func TestBlockingTooWideARangeIsRefused(t *testing.T) {
	e := newEnv(t, testenv.Bolt(t), behindProxy())
	brandID, key := e.brand()
	for _, cidr := range []string{"0.0.0.0/0", "::/0", "0.0.0.0/1", "128.0.0.0/7", "::ffff:0.0.0.0/96", "2000::/3", "2001:db8::/11"} {
		r := e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": cidr})
		if r.status != 422 || r.errorCode() != "validation_error" || !strings.Contains(string(r.body), "cidr") || !strings.Contains(string(r.body), "wider than") {
			t.Errorf("blocking %s: %d %s, want 422 saying the range is too wide", cidr, r.status, r.body)
		}
	}
	if got := e.listAll("/api/v1/fraud/blocked-ips", key); len(got) != 0 {
		t.Fatalf("%d ranges stored after refused ones, want none", len(got))
	}
	link := "/c/" + e.offer(key, clickDest) + "?pid=" + e.activePartner(brandID, key)
	var c tally.Click
	e.must(200, e.call("GET", "/api/v1/clicks/"+clickIDOf(t, e.must(302, e.clickFrom(link, "198.51.100.7", browserUA))), key, nil)).decode(t, &c)
	if c.FraudScore != 0 || len(c.FraudSignals) != 0 {
		t.Errorf("a click after the refused ranges scores %d %v, want 0 and no signal", c.FraudScore, c.FraudSignals)
	}
	// The widest ranges allowed still block.
	for _, cidr := range []string{"198.0.0.0/8", "2001::/12"} {
		e.must(201, e.call("POST", "/api/v1/fraud/blocked-ips", key, map[string]any{"cidr": cidr}))
	}
	e.must(200, e.call("GET", "/api/v1/clicks/"+clickIDOf(t, e.must(302, e.clickFrom(link, "198.51.100.8", browserUA))), key, nil)).decode(t, &c)
	if !slices.Contains(c.FraudSignals, "blocked_ip") {
		t.Errorf("a click from 198.0.0.0/8 has signals %v, want blocked_ip", c.FraudSignals)
	}
}
