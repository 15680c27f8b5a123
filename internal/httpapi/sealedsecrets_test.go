package httpapi_test

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/secretbox/secretboxtest"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
	"github.com/tally-hq/tally/webhook"
)

// Signing secrets are sealed in their items (KMS cannot run here: the data
// key is wrapped by secretboxtest.FakeKMS; the stores are real): the raw
// item holds no clear secret, rotated or not, and a webhook signed with a
// sealed secret verifies with the npm standardwebhooks verifier. A secret
// written in clear before sealing still signs, and is sealed at its
// subscription's next change.
func TestSigningSecretsAreSealedAtRest(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		kms := secretboxtest.New()
		// The npm verifiers check the timestamp against the real clock.
		e := newPipelineEnvAt(t, st, time.Now(), nil, service.WithSecrets(kms))
		brandID, key := e.brand()
		partner := e.activePartner(brandID, key)
		offer := e.offer(key, nil)
		rcv := newGetReceiver(t, func(int) int { return 204 })
		var std, own tally.Subscription
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{
			"url": rcv.srv.URL, "events": []string{"conversion.created"}, "signatureScheme": "standard-webhooks"})).decode(t, &std)
		const ownSecret = "my tally secret 0123456789"
		e.must(201, e.call("POST", "/api/public/webhooks", key, map[string]any{
			"url": rcv.srv.URL + "/own", "events": []string{"cap.reached"}, "secret": ownSecret})).decode(t, &own)

		// raw is the subscription's item as stored, its Data decoded.
		raw := func(id string, clear ...string) map[string]any {
			t.Helper()
			it, err := st.Get(t.Context(), keys.Subscription(brandID, id))
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range clear {
				if strings.Contains(string(it.Data), c) || strings.Contains(strings.Join(slices.Collect(maps.Values(it.Attrs)), " "), c) {
					t.Errorf("item of %s holds the secret %q in clear: %s", id, c, it.Data)
				}
			}
			var data map[string]any
			if err := json.Unmarshal(it.Data, &data); err != nil {
				t.Fatal(err)
			}
			return data
		}
		if data := raw(std.ID, std.Secret); !strings.HasPrefix(data["secret"].(string), "tsb1:") {
			t.Errorf("stored secret %v, want it sealed", data["secret"])
		}
		raw(own.ID, ownSecret)

		e.must(201, e.call("POST", "/api/v1/conversions", key, map[string]any{"offerId": offer, "partnerId": partner, "externalTxnId": "sealed-1"}))
		e.waitFor(key, "status=succeeded", "sealed-1 delivered", func(ds []tally.Delivery) bool { return len(ds) == 1 })
		got := nodeVerify(t, []string{std.Secret}, []standardRequest{rcv.standard(t, 0)})
		if got[0]["standardwebhooks"] != "ok" {
			t.Errorf("npm standardwebhooks on a delivery signed with a sealed secret: %v", got[0])
		}

		// A rotation keeps both secrets sealed.
		const newSecret = "my new tally secret 98765"
		e.must(200, e.call("PATCH", "/api/public/webhooks/"+own.ID, key, map[string]any{"secret": newSecret}))
		if data := raw(own.ID, ownSecret, newSecret); !strings.HasPrefix(data["previousSecret"].(string), "tsb1:") {
			t.Errorf("stored previousSecret %v, want it sealed", data["previousSecret"])
		}

		// An item as written before sealing: its secret in clear.
		data := raw(own.ID)
		data["secret"] = ownSecret
		delete(data, "previousSecret")
		delete(data, "previousSecretExpiresAt")
		it, _ := st.Get(t.Context(), keys.Subscription(brandID, own.ID))
		it.Data, _ = json.Marshal(data)
		if err := st.Transact(t.Context(), store.Put(it)); err != nil {
			t.Fatal(err)
		}
		e.must(202, e.call("POST", "/api/public/webhooks/"+own.ID+"/test", key, nil))
		deadline := time.Now().Add(10 * time.Second)
		for len(rcv.requests()) < 2 {
			if time.Now().After(deadline) {
				t.Fatal("the test event never came")
			}
			time.Sleep(5 * time.Millisecond)
		}
		rcv.mu.Lock()
		header, body := rcv.got[1].Header.Get(webhook.SignatureHeader), rcv.bodies[1]
		rcv.mu.Unlock()
		if err := webhook.Verify(ownSecret, header, body, time.Hour); err != nil {
			t.Errorf("a secret stored in clear does not sign: %q: %v", header, err)
		}
		e.must(200, e.call("PATCH", "/api/public/webhooks/"+own.ID, key, map[string]any{"events": []string{"cap.reached", "partner.banned"}}))
		if data := raw(own.ID, ownSecret); !strings.HasPrefix(data["secret"].(string), "tsb1:") {
			t.Errorf("after a change the clear secret is stored as %v, want it sealed", data["secret"])
		}
		if kms.Generated.Load() != 1 {
			t.Errorf("%d data keys made, want 1 for the deployment", kms.Generated.Load())
		}
	})
}
