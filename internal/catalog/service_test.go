package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/catalog/schemacheck"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestMain(m *testing.M) { dynamotest.Main(m) }

// notEmittedYet are the events no code path of Tally emits
// today; their schemas are checked against the Go types instead (see
// TestPayloadsFromGoTypes). Take an event out of this list as soon as the
// service emits it, and drive it below.
var notEmittedYet = map[string]bool{tally.EventWebhookTest: true}

var start = testenv.Start()

// service is one brand on a fresh embedded store with a settable clock.
type brandService struct {
	t       *testing.T
	ctx     context.Context
	clock   *testenv.Clock
	svc     *service.Service
	brandID string
	n       int
}

func newService(t *testing.T) *brandService {
	s := &brandService{t: t, ctx: context.Background(), clock: testenv.NewClock(start)}
	s.svc = servicetest.New(testenv.Bolt(t), service.WithClock(s.clock.Now))
	b, err := s.svc.Identity.CreateBrand(s.ctx, "Acme Outdoor")
	if err != nil {
		t.Fatal(err)
	}
	s.brandID = b.ID
	return s
}

func ptr[T any](v T) *T { return &v }

func (s *brandService) offer(approval string, holdHours int, caps tally.Caps) tally.Offer {
	s.t.Helper()
	o, err := s.svc.Offers.CreateOffer(s.ctx, s.brandID, offers.OfferInput{
		Name: ptr("Hiking boots"), DestinationURL: ptr("https://shop.example/boots?c={click_id}"),
		RevenueCents: ptr(int64(4999)), PayoutCents: ptr(int64(750)), Currency: ptr("USD"),
		Approval: ptr(approval), HoldHours: ptr(holdHours), Caps: &caps,
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return o
}

func (s *brandService) apply(name, email string) tally.Partner {
	s.t.Helper()
	s.n++
	p, err := s.svc.Partners.Apply(s.ctx, s.brandID, partners.ApplicationInput{
		Name: ptr(name), Email: ptr(email),
		Website: ptr(fmt.Sprintf("https://partner%d.example", s.n)), Message: ptr("We review outdoor gear."),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	return p
}

func (s *brandService) do(what string, err error) {
	s.t.Helper()
	if err != nil {
		s.t.Fatalf("%s: %v", what, err)
	}
}

func (s *brandService) convert(offerID, partnerID string, in conversions.ConversionInput) tally.Conversion {
	s.t.Helper()
	in.OfferID, in.PartnerID = &offerID, &partnerID
	c, created, err := s.svc.Conversions.RecordConversion(s.ctx, s.brandID, in)
	if err != nil || !created {
		s.t.Fatalf("record conversion: created=%v err=%v", created, err)
	}
	return c
}

// envelopes returns every event of the brand as the JSON envelope that is
// delivered.
func (s *brandService) envelopes() []tally.Event {
	s.t.Helper()
	var out []tally.Event
	p := records.ListParams{Limit: records.MaxLimit}
	for {
		page, next, err := s.svc.Events.Events(s.ctx, s.brandID, p)
		if err != nil {
			s.t.Fatal(err)
		}
		out = append(out, page...)
		if next == "" {
			return out
		}
		p.Cursor = next
	}
}

// variant names what an event says beyond its name, so that the test can
// ask for every status, reason and previous status to have been seen.
func variant(t *testing.T, e tally.Event) string {
	var d struct{ Status, Reason, PreviousStatus, Cap, Rule string }
	if err := json.Unmarshal(e.Data, &d); err != nil {
		t.Fatalf("%s data: %v", e.Event, err)
	}
	switch {
	case strings.HasPrefix(e.Event, "conversion."):
		return e.Event + " " + d.Status + " " + d.Reason
	case e.Event == tally.EventPartnerBanned:
		return e.Event + " " + d.Status + " " + d.PreviousStatus + " " + d.Reason + " " + d.Rule
	case strings.HasPrefix(e.Event, "partner."):
		return e.Event + " " + d.Status + " " + d.PreviousStatus
	case e.Event == tally.EventCapReached:
		return e.Event + " " + d.Cap
	}
	return e.Event
}

// Test (3): drive the real service through every transition that emits an
// event and check every envelope it wrote against the catalog.
func TestServiceEventsMatchSchemas(t *testing.T) {
	s := newService(t)

	// Partners: applied → active → banned; applied → rejected → banned;
	// applied → banned. The last has a name and address outside ASCII.
	alice := s.apply("Trail Gear Reviews", "maria@trailgear.example")
	_, err := s.svc.Partners.ApprovePartner(s.ctx, s.brandID, alice.ID)
	s.do("approve partner", err)
	turnedDown := s.apply("Coupon Blast", "deals@couponblast.example")
	_, err = s.svc.Partners.RejectPartner(s.ctx, s.brandID, turnedDown.ID)
	s.do("reject partner", err)
	_, err = s.svc.Partners.BanPartner(s.ctx, s.brandID, turnedDown.ID)
	s.do("ban rejected partner", err)
	_, err = s.svc.Partners.ReactivatePartner(s.ctx, s.brandID, turnedDown.ID)
	s.do("reactivate banned partner", err)
	_, err = s.svc.Partners.BanPartner(s.ctx, s.brandID, turnedDown.ID)
	s.do("ban reactivated partner", err)
	spammer := s.apply("  Jörg's Bärenstark Deals  ", "jörg@exämple.com")
	_, err = s.svc.Partners.BanPartner(s.ctx, s.brandID, spammer.ID)
	s.do("ban applied partner", err)

	// An automatic offer with a global cap of 2: the first conversion is
	// approved at once, the second reaches the cap, the third is refused.
	auto := s.offer(tally.ApprovalAuto, 0, tally.Caps{Global: ptr(int64(2))})
	s.convert(auto.ID, alice.ID, conversions.ConversionInput{
		Sub1: ptr("spring-sale"), ExternalTxnID: ptr("ORD-100482"), RevenueCents: ptr(int64(0)), PayoutCents: ptr(int64(0)), Currency: ptr("EUR"),
	})
	// The same externalTxnId again creates nothing.
	if _, created, err := s.svc.Conversions.RecordConversion(s.ctx, s.brandID, conversions.ConversionInput{
		OfferID: &auto.ID, PartnerID: &alice.ID, ExternalTxnID: ptr("ORD-100482"),
	}); err != nil || created {
		t.Fatalf("replayed conversion: created=%v err=%v", created, err)
	}
	s.convert(auto.ID, alice.ID, conversions.ConversionInput{Sub1: ptr(strings.Repeat("s", 255))})
	if _, _, err := s.svc.Conversions.RecordConversion(s.ctx, s.brandID, conversions.ConversionInput{OfferID: &auto.ID, PartnerID: &alice.ID}); tally.ErrorCode(err) != tally.ECodeCapReached {
		t.Fatalf("conversion over the cap: %v, want cap_reached", err)
	}

	// A manual offer: one conversion approved by hand, one rejected.
	manual := s.offer(tally.ApprovalManual, 0, tally.Caps{})
	toApprove := s.convert(manual.ID, alice.ID, conversions.ConversionInput{PayoutCents: ptr(int64(0))})
	toReject := s.convert(manual.ID, alice.ID, conversions.ConversionInput{ExternalTxnID: ptr("ORD-100317")})
	_, err = s.svc.Conversions.ApproveConversion(s.ctx, s.brandID, toApprove.ID)
	s.do("approve conversion", err)
	_, err = s.svc.Conversions.RejectConversion(s.ctx, s.brandID, toReject.ID)
	s.do("reject conversion", err)
	// The approved one is refunded, with a note.
	_, err = s.svc.Conversions.ReverseConversion(s.ctx, s.brandID, toApprove.ID, conversions.ReversalInput{Reason: ptr(tally.ReversalRefund), Note: ptr("Returned on day 3.")})
	s.do("reverse conversion", err)

	// A manual offer with a hold: approved automatically once it elapses.
	held := s.offer(tally.ApprovalManual, 24, tally.Caps{})
	s.convert(held.ID, alice.ID, conversions.ConversionInput{})
	s.clock.Set(start.Add(24*time.Hour + time.Second))
	if n, err := s.svc.Conversions.ApproveDue(s.ctx); err != nil || n != 1 {
		t.Fatalf("ApproveDue after the hold: approved %d (%v), want 1", n, err)
	}

	// A partner whose clicks come from a bot is banned by the auto-ban rule
	// at its second high-risk click; a clean click before raises nothing.
	clicker := s.apply("Click Farm Media", "ops@clickfarm.example")
	_, err = s.svc.Partners.ApprovePartner(s.ctx, s.brandID, clicker.ID)
	s.do("approve partner", err)
	_, err = s.svc.Clicks.UpdateFraudSettings(s.ctx, s.brandID, clicks.FraudSettingsInput{Threshold: ptr(70),
		AutoBan: &clicks.AutoBanInput{Enabled: ptr(true), HighRiskClicks: ptr(2), WindowHours: ptr(24)}})
	s.do("enable auto-ban", err)
	for _, visit := range []struct{ ip, ua string }{
		{"192.0.2.10", "Mozilla/5.0 (X11; Linux x86_64; rv:133.0) Gecko/20100101 Firefox/133.0"},
		{"3.5.140.1", ""},         // AWS, no User-Agent: 90
		{"2001:db8::9", "curl/8"}, // a bot: 80, the second high-risk click
	} {
		_, _, err := s.svc.Clicks.RecordClick(s.ctx, clicks.ClickInput{OfferID: manual.ID, PartnerID: clicker.ID, IP: netip.MustParseAddr(visit.ip), UserAgent: visit.ua})
		s.do("click", err)
	}

	// The month's close: what alice is owed in USD, paid.
	payout, err := s.svc.Payouts.CreatePayout(s.ctx, s.brandID, payouts.CreateInput{Currency: ptr("USD")})
	s.do("create payout", err)
	_, err = s.svc.Payouts.MarkPaid(s.ctx, s.brandID, payout.ID)
	s.do("mark payout paid", err)

	// Banning the active partner comes last: its conversions stop here.
	_, err = s.svc.Partners.BanPartner(s.ctx, s.brandID, alice.ID)
	s.do("ban active partner", err)

	seen := map[string]int{}
	for _, e := range s.envelopes() {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemacheck.ValidateEnvelope(raw); err != nil {
			t.Errorf("the service wrote an envelope the catalog refuses: %v\n%s", err, raw)
		}
		if e.BrandID != s.brandID {
			t.Errorf("%s: brandId %s, want %s", e.ID, e.BrandID, s.brandID)
		}
		seen[e.Event]++
		seen[variant(t, e)]++
	}

	for _, name := range catalog.Names() {
		if !notEmittedYet[name] && seen[name] == 0 {
			t.Errorf("no %s event was emitted; drive it in this test", name)
		}
		if notEmittedYet[name] && seen[name] > 0 {
			t.Errorf("the service now emits %s: take it out of notEmittedYet", name)
		}
	}
	for _, v := range []string{
		"conversion.created approved ", "conversion.created pending ",
		"conversion.approved approved manual", "conversion.approved approved hold_elapsed",
		"conversion.rejected rejected manual",
		"partner.applied applied ", "partner.approved active applied", "partner.rejected rejected applied",
		"partner.banned banned applied manual ", "partner.banned banned active manual ", "partner.banned banned rejected manual ",
		"partner.banned banned active automation fraud.high_risk_clicks",
		"cap.reached global",
	} {
		if seen[v] == 0 {
			t.Errorf("no event %q was emitted", v)
		}
	}
	if t.Failed() {
		t.Logf("events seen: %v", seen)
	}
}

// The period caps (daily, weekly, monthly) emit cap.reached with the period
// the catalog publishes: a date, an ISO week (2026-W47), a month (2026-11).
func TestServiceCapPeriodsMatchSchema(t *testing.T) {
	s := newService(t)
	p := s.apply("Trail Gear Reviews", "maria@trailgear.example")
	_, err := s.svc.Partners.ApprovePartner(s.ctx, s.brandID, p.ID)
	s.do("approve partner", err)
	o := s.offer(tally.ApprovalAuto, 0, tally.Caps{Daily: ptr(int64(1)), Weekly: ptr(int64(2)), Monthly: ptr(int64(3))})
	// A Friday reaches the day's cap; the Saturday the day's and the ISO
	// week's; the Monday after (next week, same month) the day's and the
	// month's.
	friday := start.Truncate(24 * time.Hour).Add(12 * time.Hour)
	for friday.Weekday() != time.Friday || friday.AddDate(0, 0, 3).Month() != friday.Month() {
		friday = friday.AddDate(0, 0, 1)
	}
	for _, days := range []int{0, 1, 3} {
		s.clock.Set(friday.AddDate(0, 0, days))
		s.convert(o.ID, p.ID, conversions.ConversionInput{})
	}

	caps := map[string]bool{}
	for _, e := range s.envelopes() {
		if e.Event != tally.EventCapReached {
			continue
		}
		var d tally.CapReachedEventData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			t.Fatal(err)
		}
		caps[d.Cap] = true
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		if err := schemacheck.ValidateEnvelope(raw); err != nil {
			t.Errorf("cap.reached refused: %v\n%s", err, raw)
		}
	}
	if !caps["daily"] || !caps["weekly"] || !caps["monthly"] {
		t.Errorf("cap.reached seen for %v, want daily, weekly and monthly", caps)
	}
}
