package dashboard_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// A month's close in the dashboard, with forms only (no JavaScript): a
// reversal asked for on a page of its own, the partner's balance, a
// payout created, downloaded and marked paid, a banned partner
// reinstated after confirming.
func TestMoneyPagesWithoutJavaScript(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		c := client(t)
		s.signIn(c, "")
		ctx := context.Background()
		// A second conversion: the reversal leaves its 3.00 owed.
		_, _, err := s.svc.Conversions.RecordConversion(ctx, s.brandID, conversions.ConversionInput{OfferID: &d.offer.ID, PartnerID: &d.partner.ID})
		if err != nil {
			t.Fatal(err)
		}

		conv := s.get(c, "/dashboard/conversions/"+d.conv.ID)
		if !strings.Contains(conv.body, `href="/dashboard/conversions/`+d.conv.ID+`/reverse"`) {
			t.Fatal("an approved conversion's page has no way to reverse it")
		}
		confirm := s.get(c, "/dashboard/conversions/"+d.conv.ID+"/reverse")
		if confirm.status != 200 || !strings.Contains(confirm.body, "cannot be undone") || !strings.Contains(confirm.body, `<option value="chargeback">`) {
			t.Fatalf("confirmation page: %d", confirm.status)
		}
		if got, _ := s.svc.Conversions.Conversion(ctx, s.brandID, d.conv.ID); got.Status != tally.ConversionApproved {
			t.Fatal("opening the confirmation reversed the conversion")
		}
		tok := token(t, confirm)
		if p := s.post(c, "/dashboard/conversions/"+d.conv.ID+"/reverse", url.Values{"csrf": {tok}, "reason": {"returned"}}); p.status != 422 || !strings.Contains(p.body, "reason must be one of") {
			t.Errorf("a bad reason: %d", p.status)
		}
		if p := s.post(c, "/dashboard/conversions/"+d.conv.ID+"/reverse", url.Values{"csrf": {tok}, "reason": {"chargeback"}, "note": {"<b>bank</b> said so"}}); p.status != 303 {
			t.Fatalf("reverse: %d %s", p.status, p.body)
		}
		if got := s.get(c, "/dashboard/conversions/"+d.conv.ID); !strings.Contains(got.body, "chargeback: &lt;b&gt;bank&lt;/b&gt; said so") {
			t.Error("the reversed conversion's page does not say why")
		}

		partner := s.get(c, "/dashboard/partners/"+d.partner.ID)
		if !strings.Contains(partner.body, "data-balance") || !strings.Contains(partner.body, "<td>USD</td>") || !strings.Contains(partner.body, "<strong>3.00 USD</strong>") {
			t.Errorf("the partner's page lacks its balance (3.00 owed): %s", partner.body[strings.Index(partner.body, "<h2>Balance"):][:600])
		}

		payouts := s.get(c, "/dashboard/payouts")
		if payouts.status != 200 || !strings.Contains(payouts.body, "data-owed") {
			t.Fatalf("payouts page: %d", payouts.status)
		}
		// What is owed, per currency, stands before the form that pays it.
		if i, j := strings.Index(payouts.body, `<tr data-total="USD"><td>USD</td>`), strings.Index(payouts.body, "data-payout-form"); i < 0 || j < i ||
			!strings.Contains(payouts.body[i:j], "<strong>3.00 USD</strong>") {
			t.Errorf("the Payouts page does not say 3.00 USD is owed before its form")
		}
		if p := s.post(c, "/dashboard/payouts", url.Values{"csrf": {tok}, "currency": {"EUR"}}); p.status != 422 || !strings.Contains(p.body, "Nobody is owed anything in currency EUR") {
			t.Errorf("a payout nobody is owed: %d", p.status)
		}
		// The form shows the payout first, and creates nothing.
		review := s.post(c, "/dashboard/payouts", url.Values{"csrf": {tok}, "currency": {"USD"}, "through": {time.Now().UTC().Format("2006-01-02")}})
		if review.status != 200 || !strings.Contains(review.body, "Pay 3.00 USD to 1 partner?") || !strings.Contains(review.body, "Pat &lt;i&gt;Reviews&lt;/i&gt;") ||
			!strings.Contains(review.body, `name="confirm" value="yes"`) {
			t.Fatalf("the payout's review: %d %s", review.status, review.body)
		}
		if list, _, _ := s.svc.Payouts.Payouts(ctx, s.brandID, "", records.ListParams{}); len(list) != 0 {
			t.Fatalf("reviewing a payout created %d", len(list))
		}
		created := s.post(c, "/dashboard/payouts", url.Values{"csrf": {tok}, "currency": {"USD"}, "confirm": {"yes"}})
		if created.status != 303 {
			t.Fatalf("create payout: %d %s", created.status, created.body)
		}
		at := created.header.Get("Location")
		path, _, _ := strings.Cut(at, "?")
		payout := s.get(c, path)
		if !strings.Contains(payout.body, "3.00 USD") || !strings.Contains(payout.body, "Pat &lt;i&gt;Reviews&lt;/i&gt;") || !strings.Contains(payout.body, "Mark paid") {
			t.Errorf("payout page lacks its line or the paid button")
		}
		csv := s.get(c, path+"/csv")
		if !strings.HasPrefix(csv.header.Get("Content-Type"), "text/csv") || !strings.Contains(csv.body, d.partner.ID+",Pat <i>Reviews</i>,") || !strings.Contains(csv.body, ",3.00,USD,2") /* the reversed conversion and its reversal count once */ {
			t.Errorf("CSV: %s", csv.body)
		}
		if p := s.post(c, path+"/paid", url.Values{"csrf": {tok}}); p.status != 303 {
			t.Fatalf("mark paid: %d", p.status)
		}
		if p := s.get(c, path); strings.Contains(p.body, "Mark paid") || !strings.Contains(p.body, "s-paid") {
			t.Error("a paid payout still offers to mark it paid")
		}

		// Reinstating a banned partner asks first (the ban did too).
		if p := s.post(c, "/dashboard/partners/"+d.partner.ID+"/ban", url.Values{"csrf": {tok}, "confirm": {"yes"}}); p.status != 303 {
			t.Fatalf("ban: %d", p.status)
		}
		banned := s.get(c, "/dashboard/partners/"+d.partner.ID)
		if !strings.Contains(banned.body, `href="/dashboard/partners/`+d.partner.ID+`/reactivate"`) {
			t.Fatal("a banned partner's page has no way to reactivate it")
		}
		if p := s.get(c, "/dashboard/partners/"+d.partner.ID+"/reactivate"); p.status != 200 || !strings.Contains(p.body, "Reactivate") {
			t.Fatalf("reactivate confirmation: %d", p.status)
		}
		if p := s.post(c, "/dashboard/partners/"+d.partner.ID+"/reactivate", url.Values{"csrf": {tok}}); p.status != 303 {
			t.Fatalf("reactivate: %d", p.status)
		}
		if got, _ := s.svc.Partners.Partner(ctx, s.brandID, d.partner.ID); got.Status != tally.PartnerActive {
			t.Errorf("partner is %s after reactivating", got.Status)
		}
		for _, path := range []string{"/dashboard/offers/" + d.offer.ID, "/dashboard/payouts"} {
			if p := s.get(c, path); p.status != 200 {
				t.Errorf("%s: %d", path, p.status)
			}
		}
	})
}
