package dashboard_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// A delivery's page shows the request it sends: method, URL, headers with
// the signature masked, and the body.
func TestDeliveryPageShowsTheRequest(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		d := s.fill(t)
		ctx := context.Background()
		evt, err := s.svc.Endpoints.SendTestEvent(ctx, s.brandID, d.sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		refs, err := s.svc.Webhooks.FanOut(ctx, evt.ID)
		if err != nil || len(refs) != 1 {
			t.Fatalf("fan-out: %v, %v", refs, err)
		}
		c := client(t)
		s.signIn(c, "")
		p := s.get(c, "/dashboard/activity/deliveries/"+refs[0].DeliveryID)
		if p.status != 200 {
			t.Fatalf("the delivery page: %d", p.status)
		}
		for _, want := range []string{"data-request", "<strong>POST</strong> https://hooks.example.com/tally", "X-Tally-Signature: t=", ",v1=********",
			"X-Tally-Webhook-Id: " + refs[0].DeliveryID, "data-request-body", "&#34;id&#34;:&#34;" + evt.ID + "&#34;"} {
			if !strings.Contains(p.body, want) {
				t.Errorf("the delivery page lacks %q", want)
			}
		}
	})
}

// A log filtered on a rare type says when the deliveries one page looked
// at hold none of it, and goes on to older ones, where it finds them.
func TestDeliveryLogGoesOnPastAPageWithoutAMatch(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		s := newSite(t, st, httpapi.Config{})
		start := time.Now().UTC()
		mk := func(i int, typ string) endpoints.DeliveryRecord {
			at := tally.NewTime(start.Add(time.Duration(i) * time.Millisecond))
			rec := endpoints.DeliveryRecord{Delivery: tally.Delivery{ID: ids.New("wh_", at.Time), BrandID: s.brandID, Type: typ,
				EventID: ids.New("evt_", at.Time), Event: tally.EventConversionCreated, SubscriptionID: "sub_1", URL: "https://r.example/hook",
				Status: tally.DeliverySucceeded, CreatedAt: at, UpdatedAt: at, Attempts: []tally.Attempt{{At: at, StatusCode: 200}}}}
			if typ == tally.DeliveryPostback {
				rec.SubscriptionID, rec.PartnerID, rec.Event = "", "prt_1", tally.PostbackTestEvent
			}
			return rec
		}
		postback := mk(0, tally.DeliveryPostback)
		ops := []store.Op{store.Put(endpoints.DeliveryItem(postback, time.Hour))}
		for i := range records.MaxScan + 10 {
			ops = append(ops, store.Put(endpoints.DeliveryItem(mk(i+1, tally.DeliveryWebhook), time.Hour)))
			if len(ops) == store.MaxTransactOps || i == records.MaxScan+9 {
				if err := st.Transact(t.Context(), ops...); err != nil {
					t.Fatal(err)
				}
				ops = ops[:0]
			}
		}
		c := client(t)
		s.signIn(c, "")
		first := s.get(c, "/dashboard/activity/deliveries?type=postback")
		older := regexp.MustCompile(`href="([^"]+)" rel="next"`).FindStringSubmatch(first.body)
		if first.status != 200 || !strings.Contains(first.body, "None of the latest deliveries looked at match") || older == nil {
			t.Fatalf("the first page (%d) says no more than that none matched, or has no Older link:\n%s", first.status, first.body)
		}
		second := s.get(c, unescape(older[1]))
		if !strings.Contains(second.body, `data-delivery="`+postback.ID+`"`) || strings.Contains(second.body, `rel="next"`) {
			t.Errorf("the older page does not end with the postback:\n%s", second.body)
		}
		b := s.newTab(t)
		b.AtBothWidths("/dashboard/activity/deliveries?type=postback", "deliveries-none-yet", func(w int64) {
			if off := b.Offscreen("main p.empty, main .pager a"); len(off) > 0 {
				t.Errorf("at %d px: out of view: %v", w, off)
			}
		})
	})
}
