package conversions

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tally-hq/tally"
)

// The stored conversion and marker are written without reflection
// (package jsonenc, whose tests cover every field); they must stay what
// json.Marshal wrote before.
func TestItemDataIsJSON(t *testing.T) {
	at := tally.NewTime(time.Date(2026, 11, 28, 9, 0, 0, 5e6, time.UTC))
	c := tally.Conversion{ID: "cnv_1", BrandID: "brd_1", OfferID: "off_1", PartnerID: "prt_1", ClickID: "clk_1", RevenueCents: 1000,
		PayoutCents: 300, Currency: "USD", Status: tally.ConversionPending, Sub1: "<a&b>", Sub5: "é\u2028", ExternalTxnID: "o-1",
		ApproveAt: &at, ReversalReason: "fraud", ReversalNote: "n", ReversedAt: &at, CreatedAt: at, UpdatedAt: at}
	for _, c := range []tally.Conversion{c, {ID: "cnv_2", CreatedAt: at}} {
		want, _ := json.Marshal(c)
		if got := Item(c).Data; string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	if got, want := idJSON("cnv_<1>"), `"cnv_\u003c1\u003e"`; string(got) != want {
		t.Errorf("idJSON: got %s, want %s", got, want)
	}
}
