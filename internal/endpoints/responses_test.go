package endpoints_test

import (
	"bytes"
	"compress/flate"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// orderPage is the first 4 KiB of an HTML order page listing the given
// SKUs from first on.
func orderPage(first int) string {
	var page strings.Builder
	page.WriteString("<!DOCTYPE html>\n<html lang=\"en\"><head><title>Order confirmed & paid</title></head><body><table>\n")
	for i := first; page.Len() < 4096; i++ {
		fmt.Fprintf(&page, "<tr><td class=\"sku\">SKU-%04d</td><td>€%d.%02d</td></tr>\n", i*37%9973, 10+i*7%190, i*13%100)
	}
	return page.String()[:4096]
}

// noise is text that does not compress: CJK runes, next to no repeats.
func noise(seed uint64) string {
	rng := rand.New(rand.NewPCG(seed, 2))
	var b strings.Builder
	for b.Len() < 4000 {
		b.WriteRune(rune(0x4e00 + rng.IntN(0x5000))) // three bytes each
	}
	return b.String()
}

// answersEnv writes and reads deliveries of one endpoint as the delivery
// log does, at a clock the test moves.
type answersEnv struct {
	st    store.Store
	db    *records.DB
	now   atomic.Pointer[time.Time]
	brand string
}

func newAnswersEnv(st store.Store, brand string) *answersEnv {
	e := &answersEnv{st: st, brand: brand}
	now := time.Now().UTC().Truncate(time.Millisecond)
	e.now.Store(&now)
	e.db = records.New(st, func() time.Time { return *e.now.Load() }, records.ShardZeroIDs{})
	return e
}

func (e *answersEnv) record(id string, answers ...string) endpoints.DeliveryRecord {
	at := tally.NewTime(*e.now.Load())
	rec := endpoints.DeliveryRecord{Delivery: tally.Delivery{ID: id, BrandID: e.brand, Type: tally.DeliveryWebhook,
		EventID: "evt_1", Event: tally.EventConversionCreated, SubscriptionID: "sub_1", URL: "https://r.example/hook", Status: tally.DeliveryFailed,
		CreatedAt: at, UpdatedAt: at}}
	for _, a := range answers {
		rec.Attempts = append(rec.Attempts, tally.Attempt{At: at, StatusCode: 500, Response: a})
	}
	return rec
}

func (e *answersEnv) put(t *testing.T, it store.Item) {
	t.Helper()
	if err := e.st.Transact(t.Context(), store.Put(it)); err != nil {
		t.Fatal(err)
	}
}

// read reads a delivery back as the log shows it, through a with a cache
// of its own unless given.
func (e *answersEnv) read(t *testing.T, id string, a *endpoints.Answers) endpoints.DeliveryRecord {
	t.Helper()
	rec, err := records.Get[endpoints.DeliveryRecord](t.Context(), e.db, keys.Delivery(e.brand, id))
	if err != nil {
		t.Fatal(err)
	}
	if a == nil {
		a = endpoints.NewAnswers(e.db, 30*24*time.Hour)
	}
	if err := a.Show(t.Context(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

func wantAnswers(t *testing.T, what string, rec endpoints.DeliveryRecord, want ...string) {
	t.Helper()
	if len(rec.Attempts) != len(want) {
		t.Fatalf("%s: %d attempts, want %d", what, len(rec.Attempts), len(want))
	}
	for i, a := range rec.Attempts {
		if a.Response != want[i] {
			t.Errorf("%s: attempt %d's answer reads back as %d bytes %.40q…, want %d bytes %.40q…", what, i+1, len(a.Response), a.Response, len(want[i]), want[i])
		}
	}
}

func (e *answersEnv) dictionaries(t *testing.T) []store.Item {
	t.Helper()
	k := keys.AnswerDictionary(e.brand, "sub_1", 0)
	p, err := e.st.Query(t.Context(), store.Query{PK: k.PK})
	if err != nil {
		t.Fatal(err)
	}
	return p.Items
}

// The delivery log shows each attempt's answer as the receiver sent it,
// however it is stored: compressed against the endpoint's earlier answer
// (the same page, one that differs from it), alone, as it is (text that
// does not compress, a short answer), and as items written before hold it
// (JSON, HTML escaped, or that JSON compressed in base64).
func TestDeliveryAnswersReadBackAsSent(t *testing.T) {
	page, other := orderPage(0), orderPage(5)
	answers := []string{page, noise(1), "ok", other, "", page}

	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newAnswersEnv(st, "brd_answers")
		a := endpoints.NewAnswers(e.db, 30*24*time.Hour)
		it := a.Item(t.Context(), e.record("wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", answers...))
		e.put(t, it)
		wantAnswers(t, "as written", e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", nil), answers...)
		wantAnswers(t, "read by the writer", e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", a), answers...)

		// The page became the endpoint's dictionary: it and the page
		// again take a few bytes, the other page a few hundred, the noise
		// its length.
		t.Logf("stored: %d bytes", len(it.Bins["responses"]))
		if n, most := len(it.Bins["responses"]), len(answers[1])+400; n > most {
			t.Errorf("the answers are stored in %d bytes, want at most %d", n, most)
		}
		// Another delivery of the same page, from another process.
		again := endpoints.NewAnswers(e.db, 30*24*time.Hour).Item(t.Context(), e.record("wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y7", page))
		e.put(t, again)
		if n := len(again.Bins["responses"]); n > 64 {
			t.Errorf("an answer like the dictionary is stored in %d bytes, want at most 64", n)
		}
		wantAnswers(t, "another delivery", e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y7", nil), page)
		if d := e.dictionaries(t); len(d) != 1 {
			t.Errorf("the endpoint has %d dictionaries, want 1", len(d))
		}

		// Written again (a later attempt) as read: the answers stay.
		rec := e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", nil)
		rec.Attempts = append(rec.Attempts, tally.Attempt{At: rec.UpdatedAt, StatusCode: 200, Response: other})
		e.put(t, endpoints.NewAnswers(e.db, 30*24*time.Hour).Item(t.Context(), rec))
		wantAnswers(t, "written again", e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", nil), append(answers, other)...)

		// Items written before.
		js := records.MustJSON(answers)
		var z bytes.Buffer
		w, _ := flate.NewWriter(&z, flate.BestCompression)
		_, _ = w.Write(js)
		_ = w.Close()
		for i, stored := range []string{string(js), "z" + base64.RawStdEncoding.EncodeToString(z.Bytes())} {
			id := fmt.Sprintf("wh_01JD8ZK4W3Q7M2N9B6V5C1X0Z%d", i)
			old := endpoints.DeliveryItem(e.record(id, answers...), time.Hour)
			old.Bins = nil
			old.Attrs["responses"] = stored
			e.put(t, old)
			wantAnswers(t, fmt.Sprintf("an older item (%.1s…)", stored), e.read(t, id, nil), answers...)
		}
	})
}

// A dictionary outlives the deliveries that use it: one written again
// weeks later (a manual retry) compresses its old answers again, against
// this week's dictionary; and should a delivery be read once its
// dictionary is gone (after its expiry, before the table's TTL takes it),
// the log says so for those answers and shows the others.
func TestDeliveryAnswersOutliveDictionaries(t *testing.T) {
	page := orderPage(0)
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newAnswersEnv(st, "brd_answerdicts")
		keep := 30 * 24 * time.Hour
		e.put(t, endpoints.NewAnswers(e.db, keep).Item(t.Context(), e.record("wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", page, "ok")))
		first := e.dictionaries(t)
		if len(first) != 1 || time.Unix(first[0].ExpiresAt, 0).Before(e.now.Load().Add(keep+7*24*time.Hour)) {
			t.Fatalf("dictionaries %+v, want one that expires over a week after the delivery", first)
		}

		later := e.now.Load().Add(5 * 7 * 24 * time.Hour)
		e.now.Store(&later)
		rec := e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", nil)
		rec.UpdatedAt = tally.NewTime(later)
		e.put(t, endpoints.NewAnswers(e.db, keep).Item(t.Context(), rec))
		if err := st.Transact(t.Context(), store.Delete(first[0].Key)); err != nil {
			t.Fatal(err)
		}
		wantAnswers(t, "retried weeks later, the first dictionary gone", e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", nil), page, "ok")

		for _, d := range e.dictionaries(t) {
			if err := st.Transact(t.Context(), store.Delete(d.Key)); err != nil {
				t.Fatal(err)
			}
		}
		wantAnswers(t, "every dictionary gone", e.read(t, "wh_01JD8ZK4W3Q7M2N9B6V5C1X0Y8", nil), endpoints.AnswerUnavailable, "ok")
	})
}

// Processes that find an endpoint without a dictionary at once each offer
// their answer as it, and so do the attempts of one process (which wait
// for one of them): one is written, and every delivery reads back as sent
// whichever it was compressed against.
func TestDeliveryAnswersRaceForTheDictionary(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newAnswersEnv(st, "brd_answerrace")
		const n = 8
		sent := make([]string, n)
		shared := endpoints.NewAnswers(e.db, 30*24*time.Hour)
		var wg sync.WaitGroup
		for i := range n {
			sent[i] = orderPage(i * 3)
			wg.Go(func() {
				a := shared
				if i%2 == 0 {
					a = endpoints.NewAnswers(e.db, 30*24*time.Hour)
				}
				it := a.Item(t.Context(), e.record(fmt.Sprintf("wh_01JD8ZK4W3Q7M2N9B6V5C1X0%02d", i), sent[i]))
				if err := st.Transact(t.Context(), store.Put(it)); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if d := e.dictionaries(t); len(d) != 1 {
			t.Fatalf("the endpoint has %d dictionaries, want 1", len(d))
		}
		for i := range n {
			wantAnswers(t, fmt.Sprintf("delivery %d", i), e.read(t, fmt.Sprintf("wh_01JD8ZK4W3Q7M2N9B6V5C1X0%02d", i), nil), sent[i])
		}
	})
}
