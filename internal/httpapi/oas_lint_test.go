package httpapi_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"gopkg.in/yaml.v3"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/testenv"
)

// rfc3986 is what a strict `format: uri` checker (Redocly's, ajv-formats')
// allows: the unreserved and reserved characters and percent escapes.
var rfc3986 = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$`)

// TestOpenAPIPassesStrictLinters keeps fixed what Redocly's recommended
// rules found (without running Redocly here): the document has a license,
// and its examples hold under format assertions as strict as a linter's,
// in particular a destination URL with a {click_id} macro, which the
// server accepts, is not refused by a `format: uri` the document claims.
func TestOpenAPIPassesStrictLinters(t *testing.T) {
	o := loadOASContract(t)
	if o.doc.Info.License == nil || o.doc.Info.License.Name == "" {
		t.Error("info.license is missing")
	}

	raw, err := os.ReadFile(oasPath)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	asJSON, err := json.Marshal(jsonable(doc))
	if err != nil {
		t.Fatal(err)
	}
	docValue, err := jsonschema.UnmarshalJSON(bytes.NewReader(asJSON))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	c.RegisterFormat(&jsonschema.Format{Name: "uri", Validate: func(v any) error {
		if s, ok := v.(string); ok && !rfc3986.MatchString(s) {
			return fmt.Errorf("%q is not an RFC 3986 URI", s)
		}
		return nil
	}})
	if err := c.AddResource("openapi.json", docValue); err != nil {
		t.Fatal(err)
	}
	check := func(schema string, value any) {
		t.Helper()
		sch, err := c.Compile("openapi.json#/components/schemas/" + schema)
		if err != nil {
			t.Fatalf("compile %s: %v", schema, err)
		}
		if err := sch.Validate(value); err != nil {
			t.Errorf("%s refuses %v under strict formats: %v", schema, value, err)
		}
	}
	for name, s := range o.doc.Components.Schemas {
		for _, ex := range s.Value.Examples {
			check(name, jsonable(ex))
		}
	}
	// What the server accepts (see the README's first offer).
	check("OfferInput", map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/?c={click_id}", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"})
}

// jsonable turns what YAML decoding makes into what JSON encodes.
func jsonable(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, x := range v {
			out[k] = jsonable(x)
		}
		return out
	case map[any]any:
		out := map[string]any{}
		for k, x := range v {
			out[fmt.Sprint(k)] = jsonable(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = jsonable(x)
		}
		return out
	}
	return v
}

// TestOpenAPIRateLimitsMatchTheServer: each operation's success answer
// documents its budget's default limit (the X-RateLimit-Limit header's
// schema default); a server with the default configuration must count the
// operation in a budget of that size. This is what once differed: the
// document had the event catalog share the application form's budget.
func TestOpenAPIRateLimitsMatchTheServer(t *testing.T) {
	o := loadOASContract(t)
	e := newEnv(t, testenv.Bolt(t), httpapi.Config{})
	brandID, key := e.brand()
	for _, c := range []struct {
		method, path, key string
		body              any
	}{
		{"GET", "/api/v1/offers", key, nil},
		{"GET", "/api/public/webhook-events", "", nil},
		{"POST", "/api/public/brands/" + brandID + "/applications", "", map[string]any{"name": "Pat", "email": "pat@example.com"}},
	} {
		r := e.call(c.method, c.path, c.key, c.body)
		if r.status >= 300 {
			t.Fatalf("%s %s: %d %s", c.method, c.path, r.status, r.body)
		}
		req, _ := http.NewRequest(c.method, o.server+c.path, nil)
		route, _, err := o.router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		resp := route.Operation.Responses.Status(r.status)
		h := resp.Value.Headers["X-RateLimit-Limit"]
		if h == nil || h.Value.Schema == nil || h.Value.Schema.Value.Default == nil {
			t.Errorf("%s %s: the document gives %d no X-RateLimit-Limit with a default", c.method, c.path, r.status)
			continue
		}
		if documented := fmt.Sprint(h.Value.Schema.Value.Default); documented != r.header.Get("X-RateLimit-Limit") {
			t.Errorf("%s %s: the server counts it in a budget of %s a minute; the document says %s (%s)",
				c.method, c.path, r.header.Get("X-RateLimit-Limit"), documented, h.Ref)
		}
	}
}
