package httpapi_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/tally-hq/tally/internal/catalog"
)

// The document's webhook schemas are copies of the event catalog's
// (internal/catalog/schemas/*.json, served by GET /api/public/webhook-events),
// so that the document stands on its own. This test keeps the copies equal
// to the files, and the rest of the webhooks section in step with the
// catalog: one entry per event, its description, its example.
func TestOpenAPIWebhooksMatchTheCatalog(t *testing.T) {
	o := loadOASContract(t)
	events := catalog.Events()
	names := catalog.Names()

	if got := slices.Sorted(maps.Keys(o.doc.Webhooks)); !slices.Equal(got, slices.Sorted(slices.Values(names))) {
		t.Errorf("webhooks section has %v; the catalog has %v", got, names)
	}
	eventName := o.doc.Components.Schemas["EventName"]
	if eventName == nil {
		t.Fatal("no components.schemas.EventName")
	}
	var enum []string
	for _, v := range eventName.Value.Enum {
		s, _ := v.(string)
		enum = append(enum, s)
	}
	if !slices.Equal(enum, names) {
		t.Errorf("EventName enum is %v; want the catalog's names in its order %v", enum, names)
	}

	// The operation ids must be unique across paths and webhooks.
	ids := map[string]bool{}
	for _, id := range o.operations() {
		ids[id] = true
	}

	var envelopes []string
	for _, e := range events {
		item, err := o.webhookOperation(e.Name)
		if err != nil {
			t.Error(err)
			continue
		}
		op := item.Post
		if op.Summary != e.Name || op.Description != e.Description {
			t.Errorf("webhook %s: summary %q and description %q; want the event name and the catalog's description %q",
				e.Name, op.Summary, op.Description, e.Description)
		}
		if op.OperationID == "" || ids[op.OperationID] {
			t.Errorf("webhook %s: operationId %q is empty or not unique", e.Name, op.OperationID)
		}
		ids[op.OperationID] = true
		if op.Security == nil || len(*op.Security) != 0 {
			t.Errorf("webhook %s: want security: [] (receivers take no API key)", e.Name)
		}

		envelope, data, err := o.webhookSchemas(e.Name)
		if err != nil {
			t.Error(err)
			continue
		}
		envelopes = append(envelopes, envelope)
		copied, err := o.componentJSON(data)
		if err != nil {
			t.Error(err)
			continue
		}
		if err := oasSameJSON(copied, e.Schema); err != nil {
			t.Errorf("components.schemas.%s (the data of webhook %s) is not internal/catalog/schemas/%s.json: %v", data, e.Name, e.Name, err)
		}

		// The entry's example is the catalog's, and passes as a delivery.
		example, err := json.Marshal(item.Post.RequestBody.Value.Content.Get("application/json").Example)
		if err != nil {
			t.Fatal(err)
		}
		if err := oasSameJSON(example, e.Example); err != nil {
			t.Errorf("webhook %s: the example is not internal/catalog/examples/%s.json: %v", e.Name, e.Name, err)
		}
		for _, secret := range []string{"", "whsec_0123456789abcdef"} {
			if err := o.checkDelivery(oasSyntheticDelivery(e.Name, e.Example, secret)); err != nil {
				t.Errorf("the catalog's example of %s does not pass the document as a delivery: %v", e.Name, err)
			}
		}
		// Under another event's header it must not pass.
		other := names[(slices.Index(names, e.Name)+1)%len(names)]
		if o.checkDelivery(oasSyntheticDelivery(other, e.Example, "")) == nil {
			t.Errorf("the example of %s passes as a %s delivery", e.Name, other)
		}
	}

	if envelopes = slices.Compact(envelopes); len(envelopes) != 1 {
		t.Errorf("the webhooks use several envelope schemas: %v", envelopes)
	} else {
		copied, err := o.componentJSON(envelopes[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := oasSameJSON(copied, catalog.EnvelopeSchema()); err != nil {
			t.Errorf("components.schemas.%s is not internal/catalog/schemas/envelope.json: %v", envelopes[0], err)
		}
	}

	// The check is strict: a copy that drifts fails it.
	e := events[0]
	var drifted map[string]any
	if err := json.Unmarshal(e.Schema, &drifted); err != nil {
		t.Fatal(err)
	}
	drifted["required"] = drifted["required"].([]any)[1:]
	b, _ := json.Marshal(drifted)
	if oasSameJSON(b, e.Schema) == nil {
		t.Error("a schema with one required field less compares equal")
	}
}
