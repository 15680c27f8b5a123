package httpapi_test

import (
	"slices"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

func TestBrandsNeverSeeEachOthersData(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{RateLimit: 10_000})
		brandA, keyA := e.brand()
		_, keyB := e.brand()

		offer := e.offer(keyA, map[string]any{"approval": "manual"})
		partner := e.activePartner(brandA, keyA)
		applicant := e.must(201, e.call("POST", "/api/public/brands/"+brandA+"/applications", "", map[string]any{"name": "Q", "email": "q@example.com"})).field(t, "id")
		e.must(302, e.visit("/c/"+offer+"?pid="+partner, nil))
		clicks := e.listAll("/api/v1/clicks", keyA)
		if len(clicks) != 1 {
			t.Fatalf("brand A has clicks %v, want 1", clicks)
		}
		click := clicks[0]
		var conversions []string
		for range 3 {
			conversions = append(conversions, e.must(201, e.call("POST", "/api/v1/conversions", keyA, map[string]any{"offerId": offer, "partnerId": partner})).field(t, "id"))
		}

		for _, rq := range []struct{ method, path string }{
			{"GET", "/api/v1/offers/" + offer},
			{"GET", "/api/v1/partners/" + partner},
			{"POST", "/api/v1/partners/" + applicant + "/approve"},
			{"POST", "/api/v1/partners/" + applicant + "/reject"},
			{"POST", "/api/v1/partners/" + partner + "/ban"},
			{"GET", "/api/v1/conversions/" + conversions[0]},
			{"POST", "/api/v1/conversions/" + conversions[0] + "/approve"},
			{"POST", "/api/v1/conversions/" + conversions[0] + "/reject"},
			{"GET", "/api/v1/clicks/" + click},
		} {
			if r := e.call(rq.method, rq.path, keyB, nil); r.status != 404 || r.errorCode() != "not_found" {
				t.Errorf("brand B: %s %s = %d %s, want 404 not_found", rq.method, rq.path, r.status, r.body)
			}
		}
		// Using A's offer or partner in B's conversion finds nothing of A's.
		if r := e.call("POST", "/api/v1/conversions", keyB, map[string]any{"offerId": offer, "partnerId": partner}); r.status != 422 {
			t.Errorf("brand B converting on A's offer: %d %s, want 422", r.status, r.body)
		}
		for _, path := range []string{"/api/v1/offers", "/api/v1/partners", "/api/v1/conversions",
			"/api/v1/conversions?offerId=" + offer, "/api/v1/conversions?partnerId=" + partner,
			"/api/v1/clicks", "/api/v1/clicks?offerId=" + offer, "/api/v1/clicks?partnerId=" + partner} {
			if got := e.listAll(path, keyB); len(got) != 0 {
				t.Errorf("brand B lists %s: %v, want nothing", path, got)
			}
		}
		var report struct{ Data []any }
		e.must(200, e.call("GET", "/api/v1/reports?offerId="+offer, keyB, nil)).decode(t, &report)
		if len(report.Data) != 0 {
			t.Errorf("brand B report on A's offer: %v", report.Data)
		}

		// A's cursor is refused for B rather than continuing A's list.
		var page struct{ NextCursor *string }
		e.must(200, e.call("GET", "/api/v1/conversions?limit=1", keyA, nil)).decode(t, &page)
		if page.NextCursor == nil {
			t.Fatal("brand A's first page has no cursor")
		}
		if r := e.call("GET", "/api/v1/conversions?limit=1&cursor="+*page.NextCursor, keyB, nil); r.status != 422 {
			t.Errorf("brand B with A's cursor: %d %s, want 422", r.status, r.body)
		}
		// A still sees all of its own, once each, across pages.
		if got := e.listAll("/api/v1/conversions", keyA); len(got) != 3 || !slices.Contains(got, conversions[0]) {
			t.Errorf("brand A lists %v, want its 3 conversions", got)
		}
	})
}
