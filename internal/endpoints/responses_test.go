package endpoints_test

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// The delivery log shows each attempt's answer as the receiver sent it,
// however it is stored: compressed when that is shorter (an HTML page),
// as it is when not (text that does not compress, a short answer), and
// as items written before compression hold it (JSON, HTML escaped).
func TestDeliveryAnswersReadBackAsSent(t *testing.T) {
	var page strings.Builder
	page.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><title>Order confirmed & paid</title></head><body><table>\n")
	for i := 0; page.Len() < 4096; i++ {
		fmt.Fprintf(&page, "<tr><td class=\"sku\">SKU-%04d</td><td>€%d.%02d</td></tr>\n", i*37%9973, 10+i*7%190, i*13%100)
	}
	html := page.String()[:4096]
	rng := rand.New(rand.NewPCG(1, 2))
	var noise strings.Builder
	for noise.Len() < 4000 {
		noise.WriteRune(rune(0x4e00 + rng.IntN(0x5000))) // CJK: three bytes each, next to no repeats
	}
	answers := []string{html, noise.String(), "ok"}

	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		ctx := t.Context()
		db := records.New(st, time.Now, records.ShardZeroIDs{})
		at := tally.Time{Time: time.Now().UTC().Truncate(time.Millisecond)}
		rec := endpoints.DeliveryRecord{Delivery: tally.Delivery{ID: "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", BrandID: "brd_answers", Type: tally.DeliveryWebhook,
			EventID: "evt_1", Event: tally.EventConversionCreated, SubscriptionID: "sub_1", URL: "https://r.example/hook", Status: tally.DeliveryFailed,
			CreatedAt: at, UpdatedAt: at}}
		for _, a := range answers {
			rec.Attempts = append(rec.Attempts, tally.Attempt{At: at, StatusCode: 500, Response: a})
		}
		it := endpoints.DeliveryItem(rec, time.Hour)
		if err := st.Transact(ctx, store.Op{Kind: store.OpPut, Item: it}); err != nil {
			t.Fatal(err)
		}
		got, err := records.Get[endpoints.DeliveryRecord](ctx, db, keys.Delivery(rec.BrandID, rec.ID))
		if err != nil {
			t.Fatal(err)
		}
		for i, a := range got.Attempts {
			if a.Response != answers[i] {
				t.Errorf("attempt %d's answer reads back as %d bytes %.40q…, want %d bytes %.40q…", i+1, len(a.Response), a.Response, len(answers[i]), answers[i])
			}
		}
		// Compressed, in bytes, the page's answer list is less than half
		// its 4 KiB, the noise included as it is.
		if n := len(it.Bins["responses"]); n == 0 || n > len(noise.String())+4096/2 {
			t.Errorf("the answers are stored in %d bytes, want at most %d", n, len(noise.String())+4096/2)
		}

		// Items written before: the answers' JSON, HTML escaped, and that
		// JSON compressed in base64 after a "z".
		js := records.MustJSON(answers)
		var z bytes.Buffer
		w, _ := flate.NewWriter(&z, flate.BestCompression)
		_, _ = w.Write(js)
		_ = w.Close()
		for i, stored := range []string{string(js), "z" + base64.RawStdEncoding.EncodeToString(z.Bytes())} {
			old := endpoints.DeliveryItem(rec, time.Hour)
			old.Key = keys.Delivery(rec.BrandID, fmt.Sprintf("wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y%d", i))
			old.Bins = nil
			old.Attrs["responses"] = stored
			if err := st.Transact(ctx, store.Op{Kind: store.OpPut, Item: old}); err != nil {
				t.Fatal(err)
			}
			got, err = records.Get[endpoints.DeliveryRecord](ctx, db, old.Key)
			if err != nil {
				t.Fatal(err)
			}
			for j, a := range got.Attempts {
				if a.Response != answers[j] {
					t.Errorf("an older item (%.1s…): attempt %d's answer reads back as %.40q…, want %.40q…", stored, j+1, a.Response, answers[j])
				}
			}
		}
	})
}
