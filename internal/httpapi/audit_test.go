package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

type auditPage struct {
	Data       []audit.Entry `json:"data"`
	NextCursor *string       `json:"nextCursor"`
}

// auditLog reads a brand's whole audit log through the API, newest first.
func (e *env) auditLog(key string) []audit.Entry {
	e.t.Helper()
	var all []audit.Entry
	path := "/api/v1/audit-log?limit=3"
	for {
		var page auditPage
		e.must(200, e.call("GET", path, key, nil)).decode(e.t, &page)
		all = append(all, page.Data...)
		if page.NextCursor == nil {
			return all
		}
		path = "/api/v1/audit-log?limit=3&cursor=" + *page.NextCursor
	}
}

func actions(entries []audit.Entry) []string {
	out := make([]string, len(entries))
	for i, en := range entries {
		out[i] = en.Action
	}
	return out
}

// Every change made through the API is in the brand's audit log, newest
// first, naming the key that made it and never a secret; what fails or
// changes nothing leaves no entry; another brand sees none of it.
func TestAuditLogOfAPIChanges(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{}, service.WithLoopbackReceivers())
		brandID, key := e.brand()
		_, otherKey := e.brand()
		ownKeyID := e.must(200, e.call("GET", "/api/v1/keys", key, nil)).listIDs(t)[0]

		offer := e.offer(key, map[string]any{"approval": "manual"})
		e.must(200, e.call("PATCH", "/api/v1/offers/"+offer, key, map[string]any{"status": "paused"}))
		e.must(200, e.call("PATCH", "/api/v1/offers/"+offer, key, map[string]any{"status": "paused"})) // no change
		e.must(200, e.call("PATCH", "/api/v1/offers/"+offer, key, map[string]any{"status": "active"}))
		partner := e.activePartner(brandID, key)
		conv := e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner})).field(t, "id")
		e.must(200, e.call("POST", "/api/v1/conversions/"+conv+"/approve", key, nil))
		e.must(409, e.call("POST", "/api/v1/conversions/"+conv+"/approve", key, nil)) // refused: no entry
		payout := e.must(201, e.call("POST", "/api/v1/payouts", key, map[string]any{"currency": "USD"})).field(t, "id")
		e.must(200, e.call("POST", "/api/v1/payouts/"+payout+"/paid", key, nil))
		invite := e.must(201, e.call("POST", "/api/v1/partners/"+partner+"/invite", key, nil)).field(t, "inviteUrl")
		e.must(200, e.call("POST", "/api/v1/partners/"+partner+"/ban", key, nil))
		created := e.must(201, e.call("POST", "/api/v1/keys", key, map[string]any{"name": "CI"}))
		newKeyID, newSecret := created.field(t, "id"), created.field(t, "key")
		e.must(200, e.call("DELETE", "/api/v1/keys/"+newKeyID, key, nil))
		const whSecret = "whsec_audit_secret_value_1234"
		sub := e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{"url": "http://127.0.0.1:9/hook", "events": []string{"payout.paid"}, "secret": whSecret})).field(t, "id")
		e.must(200, e.call("PATCH", "/api/public/webhooks/"+sub, key, map[string]any{"events": []string{"payout.paid", "partner.banned"}}))
		e.must(200, e.call("DELETE", "/api/public/webhooks/"+sub, key, nil))

		log := e.auditLog(key)
		want := []string{"webhook.deleted", "webhook.updated", "webhook.created", "key.revoked", "key.created", "partner.banned",
			"partner.portal_invited", "payout.paid", "payout.created", "conversion.approved", "partner.approved", "offer.updated", "offer.updated", "offer.created"}
		if got := actions(log); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("audit log actions:\ngot  %v\nwant %v", got, want)
		}
		targets := map[string]string{"webhook.deleted": sub, "key.revoked": newKeyID, "partner.banned": partner, "payout.paid": payout,
			"conversion.approved": conv, "offer.created": offer, "partner.portal_invited": partner}
		for i, en := range log {
			if en.Actor != audit.Key(ownKeyID) {
				t.Errorf("entry %d actor %+v, want the key %s", i, en.Actor, ownKeyID)
			}
			if want, ok := targets[en.Action]; ok && en.TargetID != want {
				t.Errorf("%s targets %q, want %q", en.Action, en.TargetID, want)
			}
			if i > 0 && en.ID >= log[i-1].ID {
				t.Errorf("entry %d is not older than the one before it", i)
			}
		}
		if got := log[12].Summary; !strings.Contains(got, "status active → paused") {
			t.Errorf("offer.updated summary %q does not say what changed", got)
		}
		if got := log[1].Summary; !strings.Contains(got, "partner.banned") {
			t.Errorf("webhook.updated summary %q does not say what changed", got)
		}
		raw := e.must(200, e.call("GET", "/api/v1/audit-log?limit=100", key, nil)).body
		for _, secret := range []string{key, newSecret, whSecret, invite[strings.LastIndex(invite, "/")+1:]} {
			if strings.Contains(string(raw), secret) {
				t.Errorf("the audit log shows a secret: %s", raw)
			}
		}

		// Tenant isolation: another brand's log is its own (empty), and a
		// cursor of this brand's log reads nothing of it there.
		if other := e.auditLog(otherKey); len(other) != 0 {
			t.Errorf("another brand sees %d entries: %v", len(other), actions(other))
		}
		var page auditPage
		e.must(200, e.call("GET", "/api/v1/audit-log?limit=1", key, nil)).decode(t, &page)
		if r := e.call("GET", "/api/v1/audit-log?limit=1&cursor="+*page.NextCursor, otherKey, nil); r.status == http.StatusOK {
			t.Errorf("another brand's cursor answered 200: %s", r.body)
		}
	})
}

// listIDs returns the ids of a list answer's items.
func (r response) listIDs(t *testing.T) []string {
	t.Helper()
	var page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	r.decode(t, &page)
	ids := make([]string, len(page.Data))
	for i, d := range page.Data {
		ids[i] = d.ID
	}
	return ids
}

// Of many requests racing to approve one conversion, the one that does has
// its entry, and the others (409) none.
func TestAuditLogUnderRacingChanges(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		e := newEnv(t, st, httpapi.Config{})
		brandID, key := e.brand()
		offer := e.offer(key, map[string]any{"approval": "manual"})
		partner := e.activePartner(brandID, key)
		conv := e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner})).field(t, "id")
		_, statuses := e.raceCalls(8, "POST", "/api/v1/conversions/"+conv+"/approve", key, nil)
		if statuses[200] != 1 || statuses[409] != 7 {
			t.Fatalf("statuses %v, want one 200 and seven 409", statuses)
		}
		n := 0
		for _, en := range e.auditLog(key) {
			if en.Action == "conversion.approved" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d conversion.approved entries, want 1", n)
		}
	})
}

// An entry is stored with a TTL 90 days after the change (the table's
// `ttl`), and the log leaves it out from then on, before the store's
// sweep gets to it.
func TestAuditEntriesLast90Days(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.NewClock(testenv.Start())
		e := newEnv(t, st, httpapi.Config{}, service.WithClock(clock.Now))
		brandID, key := e.brand()
		e.offer(key, nil)
		changedAt := clock.Now()
		page, err := st.Query(context.Background(), store.Query{PK: keys.AuditPK(brandID)})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 1 || page.Items[0].ExpiresAt != changedAt.Add(90*24*time.Hour).Unix() {
			t.Fatalf("stored entries %+v, want one expiring at %d", page.Items, changedAt.Add(90*24*time.Hour).Unix())
		}
		clock.Advance(90*24*time.Hour - time.Second)
		if got := e.auditLog(key); len(got) != 1 {
			t.Fatalf("a second before 90 days: %d entries, want 1", len(got))
		}
		clock.Advance(time.Second)
		if got := e.auditLog(key); len(got) != 0 {
			t.Fatalf("after 90 days: %v, want none", actions(got))
		}
	})
}
