package dashboard_test

import (
	"context"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
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
