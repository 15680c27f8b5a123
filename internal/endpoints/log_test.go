package endpoints_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// readCounter counts the items a store's queries return.
type readCounter struct {
	store.Store
	items atomic.Int64
}

func (r *readCounter) Query(ctx context.Context, q store.Query) (store.Page, error) {
	p, err := r.Store.Query(ctx, q)
	r.items.Add(int64(len(p.Items)))
	return p, err
}

// logEnv writes deliveries as the pipeline does and lists them as the
// delivery log does.
type logEnv struct {
	st    *readCounter
	db    *records.DB
	log   *endpoints.Log
	start time.Time
	n     int
}

func newLogEnv(st store.Store) *logEnv {
	e := &logEnv{st: &readCounter{Store: st}, start: time.Now().UTC().Truncate(time.Millisecond)}
	e.db = records.New(e.st, time.Now, records.SpreadIDs{})
	e.log = endpoints.NewLog(e.db, nil, 30*24*time.Hour, endpoints.NoRequeue)
	return e
}

// delivery makes the next delivery of the brand, a millisecond after the
// last one (ids sort by time), in shards spread as the service spreads
// them.
func (e *logEnv) delivery(brand, typ, status string) endpoints.DeliveryRecord {
	at := e.start.Add(time.Duration(e.n) * time.Millisecond)
	e.n++
	rec := endpoints.DeliveryRecord{Delivery: tally.Delivery{ID: ids.New("wh_", at), BrandID: brand, Type: typ,
		EventID: ids.New("evt_", at), Event: tally.EventConversionCreated, URL: "https://r.example/hook", Status: status,
		CreatedAt: tally.NewTime(at), UpdatedAt: tally.NewTime(at)}}
	if typ == tally.DeliveryPostback {
		rec.Event, rec.PartnerID = tally.PostbackTestEvent, "prt_1"
	} else {
		rec.SubscriptionID = "sub_1"
	}
	if status != tally.DeliveryPending {
		rec.Attempts = []tally.Attempt{{At: rec.CreatedAt, StatusCode: map[bool]int{true: 200, false: 500}[status == tally.DeliverySucceeded]}}
	}
	return rec
}

func (e *logEnv) put(t *testing.T, items ...store.Item) {
	t.Helper()
	for len(items) > 0 {
		n := min(len(items), 50)
		ops := make([]store.Op, n)
		for i, it := range items[:n] {
			ops[i] = store.Put(it)
		}
		if err := e.st.Transact(t.Context(), ops...); err != nil {
			t.Fatal(err)
		}
		items = items[n:]
	}
}

// list lists every page of a filter, limit deliveries a page.
func (e *logEnv) list(t *testing.T, brand string, f endpoints.DeliveryFilter, limit int) []string {
	t.Helper()
	var got []string
	p := records.ListParams{Limit: limit}
	for pages := 0; ; pages++ {
		if pages > 100 {
			t.Fatalf("%+v: more than 100 pages", f)
		}
		ds, next, err := e.log.Deliveries(t.Context(), brand, f, p)
		if err != nil {
			t.Fatalf("%+v: %v", f, err)
		}
		if len(ds) > limit {
			t.Fatalf("%+v: a page of %d deliveries, limit %d", f, len(ds), limit)
		}
		for _, d := range ds {
			got = append(got, d.ID)
		}
		if p.Cursor = next; next == "" {
			return got
		}
	}
}

// gsi1 lists the ids in a brand's GSI1 partitions of one status.
func (e *logEnv) gsi1(t *testing.T, brand, status string) []string {
	t.Helper()
	var got []string
	for _, typ := range []string{tally.DeliveryWebhook, tally.DeliveryPostback} {
		for shard := range keys.Shards {
			p, err := e.st.Query(t.Context(), store.Query{Index: store.GSI1, PK: keys.DeliveriesByTypeStatus(brand, typ, status, shard), Limit: 1000})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range p.Items {
				got = append(got, it.GSI1.SK)
			}
		}
	}
	slices.Sort(got)
	return got
}

// The delivery log lists each filter's deliveries exactly, newest first
// across pages, whatever index holds them: GSI1 only the pending and
// failed ones, so a delivery that succeeds leaves it and one retried comes
// back; a succeeded delivery that older code put in GSI1 shows once.
func TestDeliveryLogFilters(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newLogEnv(st)
		const brand, other = "brd_logfilters", "brd_logother"
		types := []string{tally.DeliveryWebhook, tally.DeliveryPostback}
		statuses := []string{tally.DeliveryPending, tally.DeliverySucceeded, tally.DeliveryFailed}

		var recs []endpoints.DeliveryRecord
		for i := range 30 {
			typ, status := tally.DeliveryWebhook, tally.DeliverySucceeded
			if i%4 == 3 {
				typ = tally.DeliveryPostback
			}
			switch i % 7 {
			case 2:
				status = tally.DeliveryFailed
			case 5:
				status = tally.DeliveryPending
			}
			recs = append(recs, e.delivery(brand, typ, status))
		}
		var items []store.Item
		for _, rec := range recs {
			items = append(items, endpoints.DeliveryItem(rec, 30*24*time.Hour))
		}
		// Another brand's deliveries of every type and status, newer.
		for _, typ := range types {
			for _, status := range statuses {
				items = append(items, endpoints.DeliveryItem(e.delivery(other, typ, status), 30*24*time.Hour))
			}
		}
		// A succeeded delivery as older code wrote it, with a GSI1 entry.
		old := endpoints.DeliveryItem(recs[0], 30*24*time.Hour)
		old.GSI1 = store.IndexKey{PK: keys.DeliveriesByTypeStatus(brand, recs[0].Type, recs[0].Status, keys.ShardOf(recs[0].ID)), SK: recs[0].ID}
		items[0] = old
		items = append(items, store.Item{Key: keys.Subscription(brand, "sub_1"), Data: []byte("{}")})
		e.put(t, items...)

		// A pending delivery succeeds; a failed one is retried by hand.
		moved := &recs[5]
		moved.Status, moved.Attempts = tally.DeliverySucceeded, []tally.Attempt{{At: moved.CreatedAt, StatusCode: 200}}
		e.put(t, endpoints.DeliveryItem(*moved, 30*24*time.Hour))
		retried := &recs[9]
		if retried.Type != tally.DeliveryWebhook || retried.Status != tally.DeliveryFailed {
			t.Fatalf("delivery 9 is a %s %s, want a failed webhook", retried.Status, retried.Type)
		}
		d, err := e.log.RetryDelivery(t.Context(), brand, retried.ID)
		if err != nil {
			t.Fatal(err)
		}
		retried.Status = d.Status
		if d.Status != tally.DeliveryPending {
			t.Fatalf("the retried delivery is %s", d.Status)
		}

		want := func(status string) []string {
			var out []string
			for _, rec := range recs {
				if rec.Status == status {
					out = append(out, rec.ID)
				}
			}
			return out
		}
		if got, want := e.gsi1(t, brand, tally.DeliverySucceeded), []string{recs[0].ID}; !slices.Equal(got, want) {
			t.Errorf("GSI1 holds succeeded deliveries %v, want only the one older code wrote, %v", got, want)
		}
		for _, status := range []string{tally.DeliveryPending, tally.DeliveryFailed} {
			if got, want := e.gsi1(t, brand, status), want(status); !slices.Equal(got, want) {
				t.Errorf("GSI1 holds %s deliveries %v, want %v", status, got, want)
			}
		}

		for _, typ := range append([]string{""}, types...) {
			for _, status := range append([]string{""}, statuses...) {
				f := endpoints.DeliveryFilter{Type: typ, Status: status}
				var want []string
				for _, rec := range slices.Backward(recs) {
					if (typ == "" || rec.Type == typ) && (status == "" || rec.Status == status) {
						want = append(want, rec.ID)
					}
				}
				if got := e.list(t, brand, f, 3); !slices.Equal(got, want) {
					t.Errorf("type %q status %q lists\n%v\nwant\n%v", typ, status, got, want)
				}
			}
		}

		// A cursor continues only its brand's list.
		f := endpoints.DeliveryFilter{Status: tally.DeliverySucceeded}
		_, next, err := e.log.Deliveries(t.Context(), brand, f, records.ListParams{Limit: 2})
		if err != nil || next == "" {
			t.Fatalf("first page: next %q, %v", next, err)
		}
		if _, _, err := e.log.Deliveries(t.Context(), other, f, records.ListParams{Limit: 2, Cursor: next}); tally.ErrorCode(err) != tally.ECodeValidation {
			t.Errorf("another brand's cursor: %v, want a validation error", err)
		}
	})
}

// A page reads little more than it lists when most deliveries match (the
// succeeded ones), and at most records.MaxScan items when few do: then it
// lists what it found, with a cursor to go on.
func TestDeliveryLogPageWork(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newLogEnv(st)
		const brand = "brd_logwork"
		postback := e.delivery(brand, tally.DeliveryPostback, tally.DeliverySucceeded)
		items := []store.Item{endpoints.DeliveryItem(postback, time.Hour)}
		for range records.MaxScan + 50 {
			items = append(items, endpoints.DeliveryItem(e.delivery(brand, tally.DeliveryWebhook, tally.DeliverySucceeded), time.Hour))
		}
		e.put(t, items...)

		const limit = 10
		e.st.items.Store(0)
		ds, next, err := e.log.Deliveries(t.Context(), brand, endpoints.DeliveryFilter{Status: tally.DeliverySucceeded}, records.ListParams{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if read, most := e.st.items.Load(), int64(keys.Shards*(limit+1)); len(ds) != limit || next == "" || read > most {
			t.Errorf("succeeded: %d deliveries (next %q) from %d items read, want %d from at most %d", len(ds), next, read, limit, most)
		}

		f := endpoints.DeliveryFilter{Type: tally.DeliveryPostback}
		e.st.items.Store(0)
		ds, next, err = e.log.Deliveries(t.Context(), brand, f, records.ListParams{Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		if read, most := e.st.items.Load(), int64(records.MaxScan+keys.Shards*(limit+1)); len(ds) != 0 || next == "" || read > most {
			t.Errorf("postbacks, first page: %d deliveries (next %q) from %d items read, want none, a cursor, at most %d read", len(ds), next, read, most)
		}
		ds, next, err = e.log.Deliveries(t.Context(), brand, f, records.ListParams{Limit: limit, Cursor: next})
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].ID != postback.ID || next != "" {
			t.Errorf("postbacks, second page: %v (next %q), want the postback and no cursor", ds, next)
		}
	})
}
