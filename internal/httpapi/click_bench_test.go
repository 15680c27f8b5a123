package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store/bolt"
)

// BenchmarkClick serves the tracking link in process on the embedded store,
// each click from an address of its own (so none is a burst): the handler,
// its rate limit and the click's write.
func BenchmarkClick(b *testing.B) {
	h, _, offerID, partnerID := benchServer(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		req := httptest.NewRequest("GET", "/c/"+offerID+"?pid="+partnerID, nil)
		req.RemoteAddr = "10." + strconv.Itoa(i>>16&255) + "." + strconv.Itoa(i>>8&255) + "." + strconv.Itoa(i&255) + ":1234"
		req.Header.Set("User-Agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0 Safari/537.36")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusFound {
			b.Fatalf("click %d: %d %s", i, w.Code, w.Body)
		}
	}
}

// BenchmarkConversion posts conversions.lua's body in process on the
// embedded store: decoding, the conversion's transaction, the answer.
func BenchmarkConversion(b *testing.B) {
	h, key, offerID, partnerID := benchServer(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		body := `{"offerId":"` + offerID + `","partnerId":"` + partnerID + `","externalTxnId":"load-` + strconv.Itoa(i) + `"}`
		req := httptest.NewRequest("POST", "/api/v1/conversions", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusCreated {
			b.Fatalf("conversion %d: %d %s", i, w.Code, w.Body)
		}
	}
}

// benchServer is the API on a new embedded store with a brand, its key, an
// active offer and an approved partner.
func benchServer(b *testing.B) (h http.Handler, key, offerID, partnerID string) {
	st, err := bolt.Open(b.TempDir()+"/tally.db", bolt.WithoutSweep())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	svc := servicetest.New(st)
	h = httpapi.New(svc.API(), httpapi.Config{Logger: slog.New(slog.DiscardHandler), RateLimit: 1 << 30}).Handler()
	ctx := context.Background()
	brand, err := svc.Identity.CreateBrand(ctx, "Brand")
	if err != nil {
		b.Fatal(err)
	}
	_, key, err = svc.Identity.CreateAPIKey(ctx, brand.ID)
	if err != nil {
		b.Fatal(err)
	}
	serve := func(method, path, secret string, body any) map[string]any {
		raw, _ := json.Marshal(body)
		req := httptest.NewRequest(method, path, bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set("Authorization", "Bearer "+secret)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code >= 300 {
			b.Fatalf("%s %s: %d %s", method, path, w.Code, w.Body)
		}
		var out map[string]any
		json.Unmarshal(w.Body.Bytes(), &out)
		return out
	}
	offerID = serve("POST", "/api/v1/offers", key, map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/p", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"})["id"].(string)
	partnerID = serve("POST", "/api/public/brands/"+brand.ID+"/applications", "", map[string]any{"name": "Pat", "email": "pat@example.com"})["id"].(string)
	serve("POST", "/api/v1/partners/"+partnerID+"/approve", key, nil)

	return h, key, offerID, partnerID
}
