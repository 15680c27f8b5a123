package outbox

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/tally-hq/tally"
)

// An event is marshalled in one pass through envelope; what is stored
// and sent must be byte for byte the tally.Event that receivers and the
// pipeline read, whatever the data holds (characters encoding/json escapes
// included).
func TestEventEnvelopeMarshalsAsEvent(t *testing.T) {
	at := tally.NewTime(time.Date(2026, 11, 22, 10, 4, 5, 123e6, time.UTC))
	data := []any{
		tally.ConversionEventData{ConversionID: "cnv_1", PartnerID: "prt_<&>", OfferID: "off_1", RevenueCents: 1000,
			PayoutCents: 300, Currency: "USD", Status: tally.ConversionApproved, Sub1: "a\"b\\c\u2028é\x01", ExternalTxnID: "x y"},
		tally.PartnerEventData{PartnerID: "prt_1", Name: "<b>Ann</b>", Email: "a&b@example.com", Status: "approved"},
		struct {
			ClickID string `json:"clickId"`
			Payout  string `json:"payout"`
		}{"clk_<1>", "3.00"},
		tally.WebhookTestEventData{SubscriptionID: "sub_1", Message: "hello"},
		map[string]any{"z": 1, "a": []string{"x"}},
	}
	for _, d := range data {
		raw, err := json.Marshal(d)
		if err != nil {
			t.Fatal(err)
		}
		want, err := json.Marshal(tally.Event{ID: "evt_1", Event: "e.v", CreatedAt: at, BrandID: "brd_1", Data: raw})
		if err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(envelope{ID: "evt_1", Event: "e.v", CreatedAt: at, BrandID: "brd_1", Data: d})
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("%T:\ngot  %s\nwant %s", d, got, want)
		}
	}
}

// The envelope of the events written by hand (marshal) is byte for byte
// json.Marshal's, every field of the data set or not.
func TestEnvelopeMarshalByHand(t *testing.T) {
	at := tally.NewTime(time.Date(2026, 11, 28, 9, 4, 5, 7e6, time.UTC))
	full := tally.ConversionEventData{ConversionID: "cnv_1", PartnerID: "prt_<&>", OfferID: "off_1", RevenueCents: 1000,
		PayoutCents: -300, Currency: "USD", Status: tally.ConversionApproved, Sub1: "a\"b\\c\u2028é\x01\xff", ExternalTxnID: "x y",
		ClickID: "clk_1", Reason: "manual", ReversalReason: "fraud", ReversalNote: "<note>"}
	for _, d := range []tally.ConversionEventData{{}, full} {
		e := envelope{ID: "evt_<1>", Event: "conversion.created", CreatedAt: at, BrandID: "brd_&", Data: d}
		want, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, err := e.marshal()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}

func BenchmarkEnvelope(b *testing.B) {
	e := envelope{ID: "evt_01kb7k3m5n6p7q8r9s0t1v2w3x", Event: tally.EventConversionCreated, CreatedAt: tally.NewTime(time.Now()), BrandID: "brd_01kb7k3m5n6p7q8r9s0t1v2w3x",
		Data: tally.ConversionEventData{ConversionID: "cnv_01kb7k3m5n6p7q8r9s0t1v2w3x", PartnerID: "prt_01kb7k3m5n6p7q8r9s0t1v2w3x",
			OfferID: "off_01kb7k3m5n6p7q8r9s0t1v2w3x", RevenueCents: 1000, PayoutCents: 300, Currency: "USD", Status: tally.ConversionApproved, ExternalTxnID: "load-1-2-3"}}
	b.Run("byhand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = e.marshal()
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = json.Marshal(e)
		}
	})
}
