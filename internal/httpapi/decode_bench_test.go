package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/conversions"
)

// BenchmarkDecodeConversion measures decodeBody on a typical postback body:
// the strict checks (UTF-8, surrogates, exact field names) on top of
// encoding/json.
func BenchmarkDecodeConversion(b *testing.B) {
	const body = `{"offerId":"off_01kb7k3m5n6p7q8r9s0t1v2w3x","partnerId":"prt_01kb7k3m5n6p7q8r9s0t1v2w3x","externalTxnId":"order-100482","revenueCents":4999,"payoutCents":750,"currency":"USD","sub1":"spring-sale"}`
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/api/v1/conversions", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var in conversions.ConversionInput
		if err := decodeBody(httptest.NewRecorder(), r, &in); err != nil {
			b.Fatal(err)
		}
	}
}
