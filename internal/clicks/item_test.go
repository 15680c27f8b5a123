package clicks

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tally-hq/tally"
)

// The stored click is written without reflection (package jsonenc, whose
// tests cover every field); it must stay what json.Marshal wrote before.
func TestItemDataIsJSON(t *testing.T) {
	at := tally.NewTime(time.Date(2026, 11, 28, 9, 0, 0, 5e6, time.UTC))
	c := tally.Click{ID: "clk_1", BrandID: "brd_1", OfferID: "off_1", PartnerID: "prt_1", IP: "203.0.113.9", UserAgent: "Mozilla <5.0> & co",
		Referer: "https://a.example/?q=\"x\"", Sub1: "s\u2028", Sub3: "é", FraudScore: 40, FraudSignals: []string{tally.SignalDatacenterIP},
		ConversionID: "cnv_1", CreatedAt: at}
	for _, c := range []tally.Click{c, {ID: "clk_2", FraudSignals: []string{}, CreatedAt: at}, {}} {
		want, _ := json.Marshal(c)
		if got := clickItem(c, at.Time).Data; string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
