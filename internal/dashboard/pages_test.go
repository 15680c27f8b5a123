package dashboard_test

import (
	"context"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/testenv"
)

// brandData is what the pages of a brand show: an offer, an active partner
// with a postback, a click from a bot whose User-Agent holds markup, the
// conversion that named it, a webhook, a blocked range and a postback
// token.
type brandData struct {
	offer    tally.Offer
	partner  tally.Partner
	click    tally.Click
	conv     tally.Conversion
	sub      tally.Subscription
	blocked  tally.BlockedIP
	otherIDs []string // another brand's offer, partner, click and webhook
}

const markupUA = `<script>window.__pwned = "ua"</script>Googlebot/2.1 (+http://www.google.com/bot.html)`

func (s *site) fill(t testing.TB) brandData {
	t.Helper()
	ctx := context.Background()
	var d brandData
	var err error
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mk := func(brandID string) (tally.Offer, tally.Partner, tally.Click) {
		o, err := s.svc.Offers.CreateOffer(ctx, brandID, offers.OfferInput{Name: ptr("Trail <b>Shoes</b>"), DestinationURL: ptr("https://shop.example/p?c={click_id}"),
			RevenueCents: ptr[int64](1000), PayoutCents: ptr[int64](300), Currency: ptr("USD"), Caps: &tally.Caps{Daily: ptr[int64](50)}})
		must(err)
		p, err := s.svc.Partners.Apply(ctx, brandID, partners.ApplicationInput{Name: ptr("Pat <i>Reviews</i>"), Email: ptr("pat@" + brandID + ".example")})
		must(err)
		p, err = s.svc.Partners.ApprovePartner(ctx, brandID, p.ID)
		must(err)
		c, _, err := s.svc.Clicks.RecordClick(ctx, clicks.ClickInput{OfferID: o.ID, PartnerID: p.ID, Subs: [5]string{"<b>spring</b>"},
			IP: netip.MustParseAddr("198.51.100.7"), UserAgent: markupUA})
		must(err)
		return o, p, c
	}
	d.offer, d.partner, d.click = mk(s.brandID)
	d.conv, _, err = s.svc.Conversions.RecordConversion(ctx, s.brandID, conversions.ConversionInput{ClickID: &d.click.ID, ExternalTxnID: ptr("order-1")})
	must(err)
	d.sub, err = s.svc.Endpoints.CreateSubscription(ctx, s.brandID, endpoints.SubscriptionInput{URL: ptr("https://hooks.example.com/tally"),
		Events: []string{tally.EventConversionCreated}, Secret: ptr("whsec_0123456789abcdef0123")})
	must(err)
	_, err = s.svc.Endpoints.PutPostback(ctx, s.brandID, d.partner.ID, endpoints.PostbackInput{URL: ptr("https://partner.example/pb?click={click_id}&amount={payout}")})
	must(err)
	d.blocked, err = s.svc.Clicks.BlockIP(ctx, s.brandID, clicks.BlockedIPInput{CIDR: ptr("203.0.113.0/24"), Note: ptr("<b>scraper</b>")})
	must(err)
	_, err = s.svc.Identity.CreatePostbackToken(ctx, s.brandID)
	must(err)

	other, err := s.svc.Identity.CreateBrand(ctx, "Other")
	must(err)
	o, p, c := mk(other.ID)
	sub, err := s.svc.Endpoints.CreateSubscription(ctx, other.ID, endpoints.SubscriptionInput{URL: ptr("https://hooks.example.com/other"), Events: []string{tally.EventConversionCreated}})
	must(err)
	d.otherIDs = []string{"/dashboard/offers/" + o.ID, "/dashboard/offers/" + o.ID + "/edit", "/dashboard/partners/" + p.ID,
		"/dashboard/clicks/" + c.ID, "/dashboard/webhooks/" + sub.ID}
	return d
}

// Every page renders with the brand's data, and what came from outside
// (names, the User-Agent, subs, notes) is text, never markup.
func TestEveryPageRenders(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		c := client(t)
		s.signIn(c, "")
		for _, path := range []string{
			"/dashboard", "/dashboard/offers", "/dashboard/offers/new", "/dashboard/offers/" + d.offer.ID, "/dashboard/offers/" + d.offer.ID + "/edit",
			"/dashboard/partners", "/dashboard/partners/" + d.partner.ID, "/dashboard/conversions", "/dashboard/conversions/" + d.conv.ID,
			"/dashboard/clicks", "/dashboard/clicks?minScore=50&offerId=" + d.offer.ID, "/dashboard/clicks/" + d.click.ID,
			"/dashboard/reports", "/dashboard/webhooks", "/dashboard/webhooks/" + d.sub.ID,
			"/dashboard/activity/deliveries", "/dashboard/activity/deliveries?type=postback&partnerId=" + d.partner.ID,
			"/dashboard/settings/keys", "/dashboard/settings/fraud", "/dashboard/settings/postback-token",
		} {
			p := s.get(c, path)
			if p.status != 200 {
				t.Errorf("%s: status %d", path, p.status)
				continue
			}
			for _, raw := range []string{"<script>", "<b>", "<i>"} {
				if strings.Contains(p.body, raw) {
					t.Errorf("%s: outside markup %q is in the page as markup", path, raw)
				}
			}
		}
		clicks := s.get(c, "/dashboard/clicks")
		for _, want := range []string{"&lt;script&gt;window.__pwned", "bot_user_agent", `href="/dashboard/conversions/` + d.conv.ID + `"`, "&lt;b&gt;spring&lt;/b&gt;", "198.51.100.7"} {
			if !strings.Contains(clicks.body, want) {
				t.Errorf("the clicks page lacks %q", want)
			}
		}
		if p := s.get(c, "/dashboard/clicks?minScore=101"); p.status != 422 || !strings.Contains(p.body, "Min score must be a whole number from 0 to 100") {
			t.Errorf("a bad filter: %d", p.status)
		}
		partner := s.get(c, "/dashboard/partners/"+d.partner.ID)
		if !strings.Contains(partner.body, "/c/"+d.offer.ID+"?pid="+d.partner.ID) || !strings.Contains(partner.body, "{conversion_id}") {
			t.Error("the partner's page lacks its tracking link or the postback macros")
		}
		for _, path := range d.otherIDs {
			if p := s.get(c, path); p.status != 404 {
				t.Errorf("another brand's %s: %d", path, p.status)
			}
		}
	})
}

// The forms of the new pages change what the API would, and show each
// problem beside its field, changing nothing.
func TestSettingsAndEditForms(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		c := client(t)
		s.signIn(c, "")
		tok := token(t, s.get(c, "/dashboard/settings/fraud"))
		post := func(path string, form url.Values) page {
			t.Helper()
			form.Set("csrf", tok)
			return s.post(c, path, form)
		}
		beside := func(p page, id, want string) {
			t.Helper()
			if p.status != 422 || !regexp.MustCompile(`id="`+regexp.QuoteMeta(id)+`">[^<]*`+regexp.QuoteMeta(want)).MatchString(p.body) {
				t.Errorf("status %d; want 422 with %q beside the field (#%s)", p.status, want, id)
			}
		}

		// Without the form's token nothing is changed.
		for path, form := range map[string]url.Values{
			"/dashboard/settings/fraud":                                {"threshold": {"5"}, "autoBan.highRiskClicks": {"20"}, "autoBan.windowHours": {"24"}},
			"/dashboard/settings/fraud/blocked-ips":                    {"cidr": {"192.0.2.0/24"}},
			"/dashboard/webhooks/" + d.sub.ID + "/delete":              {},
			"/dashboard/partners/" + d.partner.ID + "/postback/delete": {},
			"/dashboard/settings/postback-token":                       {},
		} {
			if p := s.post(c, path, form); p.status != 403 {
				t.Errorf("%s without the token: %d, want 403", path, p.status)
			}
		}
		if blocked, _, _ := s.svc.Clicks.BlockedIPs(ctx, s.brandID, records.ListParams{}); len(blocked) != 1 {
			t.Errorf("refused forms changed the blocklist: %+v", blocked)
		}
		if _, err := s.svc.Endpoints.Postback(ctx, s.brandID, d.partner.ID); err != nil {
			t.Errorf("a refused form deleted the postback: %v", err)
		}

		// Settings → Fraud.
		beside(post("/dashboard/settings/fraud", url.Values{"threshold": {"150"}, "autoBan.highRiskClicks": {"20"}, "autoBan.windowHours": {"24"}}),
			"threshold-error", "Threshold must be a whole number from 0 to 100")
		beside(post("/dashboard/settings/fraud", url.Values{"threshold": {"80"}, "autoBan.enabled": {"on"}, "autoBan.highRiskClicks": {"ten"}, "autoBan.windowHours": {"24"}}),
			"autoBan.highRiskClicks-error", "Enter a whole number")
		if got, _ := s.svc.Clicks.FraudSettings(ctx, s.brandID); got != tally.DefaultFraudSettings {
			t.Errorf("refused forms changed the settings: %+v", got)
		}
		if p := post("/dashboard/settings/fraud", url.Values{"threshold": {"85"}, "autoBan.enabled": {"on"}, "autoBan.highRiskClicks": {"5"}, "autoBan.windowHours": {"12"}}); p.status != 303 {
			t.Errorf("saving the settings: %d", p.status)
		}
		if got, _ := s.svc.Clicks.FraudSettings(ctx, s.brandID); got != (tally.FraudSettings{Threshold: 85, AutoBan: tally.AutoBan{Enabled: true, HighRiskClicks: 5, WindowHours: 12}}) {
			t.Errorf("settings after saving: %+v", got)
		}
		beside(post("/dashboard/settings/fraud/blocked-ips", url.Values{"cidr": {"not an address"}}), "cidr-error", "Address or range must be an IPv4 or IPv6 address")
		beside(post("/dashboard/settings/fraud/blocked-ips", url.Values{"cidr": {"203.0.113.0/24"}}), "cidr-error", "203.0.113.0/24 is blocked already")
		if p := post("/dashboard/settings/fraud/blocked-ips/"+d.blocked.ID+"/delete", url.Values{}); p.status != 303 {
			t.Errorf("removing a range: %d", p.status)
		}
		if list, _, _ := s.svc.Clicks.BlockedIPs(ctx, s.brandID, records.ListParams{}); len(list) != 0 {
			t.Errorf("blocked after removing: %+v", list)
		}

		// A webhook: edited, its secret rotated (shown once, with the 24 h
		// overlap), recovered.
		beside(post("/dashboard/webhooks/"+d.sub.ID, url.Values{"url": {"ftp://x"}, "events": {tally.EventConversionCreated}}), "url-error", "url")
		p := post("/dashboard/webhooks/"+d.sub.ID, url.Values{"url": {"https://hooks.example.com/v2"}, "events": {tally.EventConversionCreated, tally.EventFraudHighRisk}, "rotate": {"on"}})
		secret := regexp.MustCompile(`data-secret[^>]*>(whsec_[0-9a-f]{48})<`).FindStringSubmatch(p.body)
		if p.status != 200 || secret == nil || !strings.Contains(p.body, "24 hours") {
			t.Fatalf("rotating the secret: %d, secret %v", p.status, secret)
		}
		sub, _ := s.svc.Endpoints.Subscription(ctx, s.brandID, d.sub.ID)
		if sub.URL != "https://hooks.example.com/v2" || len(sub.Events) != 2 || sub.PreviousSecretExpiresAt == nil {
			t.Errorf("after the edit: %+v", sub)
		}
		if again := s.get(c, "/dashboard/webhooks/"+d.sub.ID); strings.Contains(again.body, secret[1]) {
			t.Error("the new secret is shown again")
		}
		beside(post("/dashboard/webhooks/"+d.sub.ID+"/recover", url.Values{"since": {"soon"}}), "since-error", "Enter a date")
		if p := post("/dashboard/webhooks/"+d.sub.ID+"/recover", url.Values{"since": {"2020-01-01"}}); p.status != 303 ||
			p.header.Get("Location") != "/dashboard/webhooks/"+d.sub.ID+"?done=webhook-recovered&n=0" {
			t.Errorf("recovering: %d %s", p.status, p.header.Get("Location"))
		}
		if p := s.get(c, "/dashboard/webhooks/"+d.sub.ID+"?done=webhook-recovered&n=0"); !strings.Contains(p.body, "Failed deliveries queued again: 0.") {
			t.Error("no notice after recovering")
		}

		// A partner's postback.
		beside(post("/dashboard/partners/"+d.partner.ID+"/postback", url.Values{"url": {"https://partner.example/pb?x={revenue}"}, "events": {tally.EventConversionCreated}}),
			"pb-url-error", "URL: {revenue} is not a macro")
		if p := post("/dashboard/partners/"+d.partner.ID+"/postback", url.Values{"url": {"https://partner.example/pb?c={click_id}&s={status}"}, "events": {tally.EventConversionApproved}}); p.status != 303 {
			t.Errorf("saving the postback: %d", p.status)
		}
		if pb, _ := s.svc.Endpoints.Postback(ctx, s.brandID, d.partner.ID); pb.URL != "https://partner.example/pb?c={click_id}&s={status}" || pb.Events[0] != tally.EventConversionApproved {
			t.Errorf("postback after saving: %+v", pb)
		}

		// An offer: a bad amount beside its field, then paused with its
		// daily cap removed and a longer attribution window.
		edit := url.Values{"name": {"Trail Shoes"}, "destinationUrl": {"https://shop.example/p?c={click_id}"}, "revenue": {"10.00"}, "payout": {"3.5.0"},
			"status": {"paused"}, "approval": {"auto"}, "holdHours": {"0"}, "attributionWindowDays": {"45"}}
		p = post("/dashboard/offers/"+d.offer.ID, edit)
		if p.status != 422 || !strings.Contains(p.body, "Enter an amount such as 12.50.") {
			t.Errorf("a bad payout: %d", p.status)
		}
		edit.Set("payout", "3.50")
		if p := post("/dashboard/offers/"+d.offer.ID, edit); p.status != 303 {
			t.Errorf("saving the offer: %d", p.status)
		}
		o, _ := s.svc.Offers.Offer(ctx, s.brandID, d.offer.ID)
		if o.Status != tally.OfferPaused || o.PayoutCents != 350 || o.Caps.Daily != nil || o.AttributionWindowDays != 45 || o.Name != "Trail Shoes" {
			t.Errorf("offer after saving: %+v", o)
		}

		// The postback token: rotated, the new secret shown once.
		p = post("/dashboard/settings/postback-token", url.Values{})
		if p.status != 200 || !regexp.MustCompile(`data-new-token[^>]*>tally_pb_[0-9a-f]{48}<`).MatchString(p.body) {
			t.Errorf("rotating the postback token: %d", p.status)
		}
		// Deleting asks first; the confirmed form deletes.
		if p := post("/dashboard/settings/postback-token/delete", url.Values{}); p.status != 200 || !strings.Contains(p.body, "data-confirm") {
			t.Errorf("deleting the postback token without confirming: %d", p.status)
		}
		if _, err := s.svc.Identity.PostbackToken(ctx, s.brandID); err != nil {
			t.Errorf("the token after the confirmation page: %v", err)
		}
		if p := post("/dashboard/settings/postback-token/delete", url.Values{"confirm": {"yes"}}); p.status != 303 {
			t.Errorf("deleting the postback token: %d", p.status)
		}
		if _, err := s.svc.Identity.PostbackToken(ctx, s.brandID); tally.ErrorCode(err) != tally.ECodeNotFound {
			t.Errorf("the token after deleting: %v", err)
		}
	})
}

// BenchmarkClicksPage renders the Clicks page of 50 clicks, signed in, over
// loopback HTTP on the embedded store: what a person waits for.
func BenchmarkClicksPage(b *testing.B) {
	st, err := bolt.Open(b.TempDir() + "/tally.db")
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	s := newSite(b, st, httpapi.Config{})
	d := s.fill(b)
	for i := range 50 {
		if _, _, err := s.svc.Clicks.RecordClick(context.Background(), clicks.ClickInput{OfferID: d.offer.ID, PartnerID: d.partner.ID,
			IP: netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), UserAgent: markupUA}); err != nil {
			b.Fatal(err)
		}
	}
	c := client(b)
	s.signIn(c, "")
	b.ResetTimer()
	for b.Loop() {
		if p := s.get(c, "/dashboard/clicks"); p.status != 200 {
			b.Fatalf("status %d", p.status)
		}
	}
}
