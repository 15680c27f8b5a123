package tracking

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// spread is the embedded store as a partitioned one: the service spreads
// new items over the shards on it, as Tally did on every store before.
type spread struct{ store.Store }

func (spread) Partitioned() {}

// On the embedded store, new clicks and conversions go to one shard, and
// those spread over all four by an earlier version stay found: by id, in
// the lists, with nothing lost between pages.
func TestEmbeddedStoreKeepsNewItemsInOneShardAndFindsOldOnes(t *testing.T) {
	st := testenv.Bolt(t)
	ctx := t.Context()
	now := testenv.Start()
	clock := WithClock(func() time.Time { return now })
	before, after := New(spread{st}, clock), New(st, clock)
	b, err := before.CreateBrand(ctx, "Acme")
	if err != nil {
		t.Fatal(err)
	}
	p, err := before.Apply(ctx, b.ID, ApplicationInput{Name: ptrTo("Pat"), Email: ptrTo("pat@example.com")})
	if err == nil {
		_, err = before.ApprovePartner(ctx, b.ID, p.ID)
	}
	if err != nil {
		t.Fatal(err)
	}
	o, err := before.CreateOffer(ctx, b.ID, OfferInput{Name: ptrTo("Shoes"), DestinationURL: ptrTo("https://shop.example/"),
		RevenueCents: ptrTo[int64](100), PayoutCents: ptrTo[int64](10), Currency: ptrTo("USD")})
	if err != nil {
		t.Fatal(err)
	}
	const each = 20
	made := map[string]string{} // id -> who made it
	shardsOf := map[string]map[int]bool{"before": {}, "after": {}}
	for i := range 2 * each {
		who, svc := "before", before
		if i >= each {
			who, svc = "after", after
		}
		c, _, err := svc.RecordClick(ctx, ClickInput{OfferID: o.ID, PartnerID: p.ID, IP: netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})})
		if err != nil {
			t.Fatal(err)
		}
		cv, _, err := svc.RecordConversion(ctx, b.ID, ConversionInput{OfferID: &o.ID, PartnerID: &p.ID, ExternalTxnID: ptrTo(fmt.Sprintf("order-%d", i))})
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{c.ID, cv.ID} {
			made[id] = who
			shardsOf[who][keys.ShardOf(id)] = true
		}
	}
	if len(shardsOf["after"]) != 1 || !shardsOf["after"][0] {
		t.Errorf("new items on the embedded store went to shards %v, want only shard 0", shardsOf["after"])
	}
	if len(shardsOf["before"]) < 2 {
		t.Fatalf("the earlier layout spread %d items over shards %v only: the test shows nothing", 2*each, shardsOf["before"])
	}
	listed := map[string]bool{}
	walk(t, listed, func(cursor string) ([]string, string, error) {
		cs, next, err := after.Clicks(ctx, b.ID, ClickFilter{}, ListParams{Limit: 7, Cursor: cursor})
		return idsOf(cs, func(c tally.Click) string { return c.ID }), next, err
	})
	walk(t, listed, func(cursor string) ([]string, string, error) {
		cs, next, err := after.Conversions(ctx, b.ID, ConversionFilter{}, ListParams{Limit: 7, Cursor: cursor})
		return idsOf(cs, func(c tally.Conversion) string { return c.ID }), next, err
	})
	for id, who := range made {
		if !listed[id] {
			t.Errorf("%s (made %s, shard %d) is not in the lists", id, who, keys.ShardOf(id))
		}
		var err error
		if id[:4] == "clk_" {
			_, err = after.Click(ctx, b.ID, id)
		} else {
			_, err = after.Conversion(ctx, b.ID, id)
		}
		if err != nil {
			t.Errorf("%s (made %s): %v", id, who, err)
		}
	}
	if len(listed) != len(made) {
		t.Errorf("the lists show %d items, want the %d made", len(listed), len(made))
	}
}

// walk pages through a list from its first page, adding the ids to seen.
func walk(t *testing.T, seen map[string]bool, page func(cursor string) (ids []string, next string, err error)) {
	t.Helper()
	for cursor := ""; ; {
		ids, next, err := page(cursor)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			seen[id] = true
		}
		if cursor = next; cursor == "" {
			return
		}
	}
}

func idsOf[T any](items []T, id func(T) string) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = id(it)
	}
	return out
}

// On the embedded store, new deliveries go to shard 0 too, and those an
// earlier version spread over all four stay found: by id, in the delivery
// log filtered by endpoint or not. A repeated fan-out makes no second
// delivery.
func TestEmbeddedStoreKeepsNewDeliveriesInOneShardAndFindsOldOnes(t *testing.T) {
	f := newEndpointFixture(t)
	before, after := New(spread{f.st}, WithLoopbackReceivers()), New(f.st, WithLoopbackReceivers())
	sub, err := before.CreateSubscription(f.ctx, f.brand.ID, SubscriptionInput{URL: ptrTo("http://127.0.0.1:9/hooks"), Events: []string{tally.EventConversionCreated}})
	if err == nil {
		_, err = before.PutPostback(f.ctx, f.brand.ID, f.partner.ID, PostbackInput{URL: ptrTo("http://127.0.0.1:9/pb?c={conversion_id}")})
	}
	if err != nil {
		t.Fatal(err)
	}
	const each = 20
	made := map[string]string{} // delivery id -> who made it
	shardsOf := map[string]map[int]bool{"before": {}, "after": {}}
	var lastEvent string
	for i := range 2 * each {
		who, svc := "before", before
		if i >= each {
			who, svc = "after", after
		}
		f.convert(svc, fmt.Sprint("order-", i))
		for shard := range keys.QueueShards { // the one event waiting: this conversion's
			page, err := f.st.Query(f.ctx, store.Query{Index: store.GSI3, PK: keys.OutboxPK(shard)})
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range page.Items {
				lastEvent = it.GSI3.SK
				recs, err := svc.fanOut(f.ctx, lastEvent)
				if err != nil || len(recs) != 2 {
					t.Fatalf("fan-out of %s: %d deliveries, %v; want 2", lastEvent, len(recs), err)
				}
				for _, rec := range recs {
					made[rec.ID] = who
					shardsOf[who][keys.ShardOf(rec.ID)] = true
				}
			}
		}
	}
	if _, err := after.fanOut(f.ctx, lastEvent); err != nil {
		t.Fatal(err)
	}
	if len(shardsOf["after"]) != 1 || !shardsOf["after"][0] {
		t.Errorf("new deliveries on the embedded store went to shards %v, want only shard 0", shardsOf["after"])
	}
	if len(shardsOf["before"]) < 2 {
		t.Fatalf("the earlier layout spread %d deliveries over shards %v only: the test shows nothing", 4*each, shardsOf["before"])
	}
	for _, filter := range []DeliveryFilter{{}, {SubscriptionID: sub.ID}, {PartnerID: f.partner.ID}} {
		listed := map[string]bool{}
		walk(t, listed, func(cursor string) ([]string, string, error) {
			ds, next, err := after.Deliveries(f.ctx, f.brand.ID, filter, ListParams{Limit: 7, Cursor: cursor})
			return idsOf(ds, func(d tally.Delivery) string { return d.ID }), next, err
		})
		if want := map[bool]int{true: 4 * each, false: 2 * each}[filter == (DeliveryFilter{})]; len(listed) != want {
			t.Errorf("delivery log %+v lists %d deliveries, want %d", filter, len(listed), want)
		}
	}
	for id, who := range made {
		if _, err := after.Delivery(f.ctx, f.brand.ID, id); err != nil {
			t.Errorf("%s (made %s, shard %d): %v", id, who, keys.ShardOf(id), err)
		}
	}
}
