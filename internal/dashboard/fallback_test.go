package dashboard_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/browsertest"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// Defect 7: a visitor following the link of a paused offer reads a page
// meant for them, not the API's JSON; once the marketer gives the offer a
// fallback URL in its form, the visitor lands there, and no click counts.
func TestPausedOfferLinkServesVisitors(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := context.Background()
		s := newSite(t, st, httpapi.Config{})
		p := s.program(t, "Boots", "USD", 0)
		if _, err := s.svc.Offers.UpdateOffer(ctx, s.brandID, p.offer.ID, offers.OfferPatch{Status: ptr(tally.OfferPaused)}); err != nil {
			t.Fatal(err)
		}
		shop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte("<!doctype html><title>More deals</title><h1>More deals</h1>"))
		}))
		t.Cleanup(shop.Close)
		link := "/c/" + p.offer.ID + "?pid=" + p.partner.ID + "&sub1=mail"
		b := s.newTab(t)

		for _, w := range []int64{1280, 390} {
			b.Width(w)
			if status := b.Open(link); status != http.StatusNotFound {
				t.Errorf("paused offer's link at %d px: status %d, want 404", w, status)
			}
			b.Shot(map[int64]string{1280: "paused-link-1280", 390: "paused-link-390"}[w])
			body := b.Text("body")
			if !strings.Contains(b.Text("h1"), "not available") || strings.ContainsAny(body, "{}") || strings.Contains(body, "not_found") || strings.Contains(body, "pid") {
				t.Errorf("paused offer's link at %d px shows %q", w, body)
			}
			if sw := browsertest.Eval[float64](b, "document.documentElement.scrollWidth"); sw > float64(w) {
				t.Errorf("the page for visitors is %v px wide at %d px", sw, w)
			}
		}
		b.Width(1280)

		b.Open("/dashboard/offers/" + p.offer.ID + "/edit")
		form := `form[action="/dashboard/offers/` + p.offer.ID + `"]`
		b.Fill(form, map[string]string{"fallbackUrl": "shop.example/more"})
		b.Submit(form+" button", `^/dashboard/offers/`)
		if msg := b.Text(`label:has(> [name="fallbackUrl"]) .field-error`); !strings.HasPrefix(msg, "Fallback URL") {
			t.Errorf("a fallback that is no URL: %q", msg)
		}
		b.Shot("offer-fallback-error-1280")
		b.Fill(form, map[string]string{"fallbackUrl": shop.URL + "/more?from={offer_id}"})
		b.Submit(form+" button", `^/dashboard/offers/off_`)
		if got := b.Text("main .facts"); !strings.Contains(got, shop.URL+"/more?from={offer_id}") {
			t.Errorf("the offer's page does not show its fallback: %q", got)
		}
		b.AtBothWidths("/dashboard/offers/"+p.offer.ID, "offer-fallback", func(int64) {})

		if status := b.Open(link); status != http.StatusOK || b.Text("h1") != "More deals" {
			t.Errorf("paused offer's link with a fallback: %d %q, want the fallback page", status, b.Text("h1"))
		}
		if href := browsertest.Eval[string](b, "location.href"); href != shop.URL+"/more?from="+p.offer.ID {
			t.Errorf("the visitor landed on %s", href)
		}
		if got, _, err := s.svc.Clicks.Clicks(ctx, s.brandID, clicks.ClickFilter{}, records.ListParams{}); err != nil || len(got) != 0 {
			t.Errorf("clicks stored for a paused offer: %v %v", got, err)
		}
	})
}
