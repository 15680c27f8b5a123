package httpapi_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/internal/webhooks"
)

// A disabled endpoint gets nothing until it is enabled: retrying one of its
// failed deliveries is refused as recovering them is, and both work once
// it is enabled. Health disabling or enabling an endpoint moves its
// updatedAt.
func TestDisabledEndpointsTakeNoRetriesAndShowWhenTheyChanged(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newPipelineEnv(t, st, service.WithEndpointHealth(1, 0))
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		down := newGetReceiver(t, func(int) int { return 500 })
		subPath := "/api/public/webhooks/" + e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": down.srv.URL, "events": []string{"conversion.created"}})).field(t, "id")
		pbPath := "/api/v1/partners/" + partner + "/postback"
		e.must(200, e.call("PUT", pbPath, key, map[string]any{"url": down.srv.URL + "/pb?c={conversion_id}"}))
		paths := []string{subPath, pbPath}
		type endpoint struct {
			tally.EndpointHealth
			UpdatedAt tally.Time
		}
		get := func(path string) endpoint {
			var v endpoint
			e.must(200, e.call("GET", path, key, nil)).decode(t, &v)
			return v
		}
		configured := get(subPath).UpdatedAt

		e.advance(time.Minute)
		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": "t-1"}))
		e.waitFor(key, "", "attempt 1", func(ds []tally.Delivery) bool { return len(ds) == 2 && attemptsMade(1)(ds) })
		for i, wait := range webhooks.RetrySchedule {
			e.advance(wait)
			e.waitFor(key, "", "the retries", attemptsMade(i+2))
		}
		failed := e.waitFor(key, "status=failed", "both deliveries to fail", func(ds []tally.Delivery) bool { return len(ds) == 2 })
		for _, path := range paths {
			if v := get(path); v.Status != tally.EndpointDisabled || v.DisabledAt == nil || !v.UpdatedAt.Equal(v.DisabledAt.Time) || !v.UpdatedAt.After(configured.Time) {
				t.Errorf("%s disabled by health: status %s, disabledAt %v, updatedAt %v; want updatedAt at disabledAt, after %v", path, v.Status, v.DisabledAt, v.UpdatedAt, configured)
			}
		}

		for _, d := range failed {
			r := e.call("POST", "/api/v1/deliveries/"+d.ID+"/retry", key, nil)
			if r.status != 409 || r.errorCode() != "invalid_transition" || !strings.Contains(errorMessage(r), "enable it") {
				t.Errorf("retry of %s to a disabled endpoint: %d %s, want 409 invalid_transition saying to enable it", d.ID, r.status, r.body)
			}
		}
		since := map[string]any{"since": testenv.Start().Format(time.RFC3339Nano)}
		for _, path := range paths {
			if r := e.call("POST", path+"/recover", key, since); r.status != 409 || r.errorCode() != "invalid_transition" {
				t.Errorf("recover of disabled %s: %d %s, want 409 invalid_transition", path, r.status, r.body)
			}
		}

		e.advance(time.Minute)
		enabledAt := e.clock.Now()
		for _, path := range paths {
			e.must(200, e.call("POST", path+"/enable", key, nil))
			if v := get(path); v.Status != tally.EndpointEnabled || !v.UpdatedAt.Equal(tally.NewTime(enabledAt).Time) {
				t.Errorf("%s enabled at %v: status %s, updatedAt %v", path, enabledAt, v.Status, v.UpdatedAt)
			}
			e.must(200, e.call("POST", path+"/enable", key, nil)) // enabled already: no entry
		}
		var enabled []string
		for _, en := range e.auditLog(key) {
			if strings.HasSuffix(en.Action, ".enabled") {
				enabled = append(enabled, en.Action+" "+en.TargetID+" "+en.Summary)
			}
		}
		slices.Sort(enabled) // made in one millisecond of the test's clock: in either order
		if want := []string{"postback.enabled " + partner + " " + down.srv.URL + "/pb?c={conversion_id}", "webhook.enabled " + strings.TrimPrefix(subPath, "/api/public/webhooks/") + " " + down.srv.URL}; strings.Join(enabled, "; ") != strings.Join(want, "; ") {
			t.Errorf("the audit log's enablings:\n got %q\nwant %q", enabled, want)
		}
		for _, d := range failed {
			var got tally.Delivery
			e.must(200, e.call("POST", "/api/v1/deliveries/"+d.ID+"/retry", key, nil)).decode(t, &got)
			if got.Status != tally.DeliveryPending {
				t.Errorf("retry of %s once enabled: %s, want pending", d.ID, got.Status)
			}
		}
	})
}
