package catalog_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"math/rand/v2"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/catalog/schemacheck"
	"github.com/tally-hq/tally/internal/ids"
)

// designOrder is the event list of DESIGN.md ("Events"), in its order.
var designOrder = []string{
	"conversion.created", "conversion.approved", "conversion.rejected",
	"partner.applied", "partner.approved", "partner.rejected", "partner.banned",
	"fraud.high_risk", "cap.reached", "webhook.test",
	"conversion.reversed", "partner.reactivated", "payout.paid",
}

// goTypes maps each event to the Go type of its data in package tally.
var goTypes = map[string]reflect.Type{
	tally.EventConversionCreated:  reflect.TypeFor[tally.ConversionEventData](),
	tally.EventConversionApproved: reflect.TypeFor[tally.ConversionEventData](),
	tally.EventConversionRejected: reflect.TypeFor[tally.ConversionEventData](),
	tally.EventConversionReversed: reflect.TypeFor[tally.ConversionEventData](),
	tally.EventPartnerReactivated: reflect.TypeFor[tally.PartnerEventData](),
	tally.EventPayoutPaid:         reflect.TypeFor[tally.PayoutEventData](),
	tally.EventPartnerApplied:     reflect.TypeFor[tally.PartnerEventData](),
	tally.EventPartnerApproved:    reflect.TypeFor[tally.PartnerEventData](),
	tally.EventPartnerRejected:    reflect.TypeFor[tally.PartnerEventData](),
	tally.EventPartnerBanned:      reflect.TypeFor[tally.PartnerEventData](),
	tally.EventFraudHighRisk:      reflect.TypeFor[tally.FraudEventData](),
	tally.EventCapReached:         reflect.TypeFor[tally.CapReachedEventData](),
	tally.EventWebhookTest:        reflect.TypeFor[tally.WebhookTestEventData](),
}

// idPrefixes says which identifier each id-valued property holds.
var idPrefixes = map[string]string{
	"id": "evt_", "brandId": "brd_", "conversionId": "cnv_", "partnerId": "prt_",
	"offerId": "off_", "clickId": "clk_", "subscriptionId": "sub_", "payoutId": "pay_",
}

// schema is the part of a JSON Schema the tests look into.
type schema struct {
	Schema               string             `json:"$schema"`
	Title                string             `json:"title"`
	Description          string             `json:"description"`
	Type                 string             `json:"type"`
	AdditionalProperties *bool              `json:"additionalProperties"`
	Required             []string           `json:"required"`
	Properties           map[string]*schema `json:"properties"`
	Pattern              string             `json:"pattern"`
	Enum                 []any              `json:"enum"`
	Minimum              *float64           `json:"minimum"`
	Maximum              *float64           `json:"maximum"`
}

func decodeSchema(t *testing.T, raw []byte) schema {
	t.Helper()
	var s schema
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatalf("schema: %v", err)
	}
	return s
}

// envelope is an example or event envelope with its data kept raw.
type envelope struct {
	ID        string          `json:"id"`
	Event     string          `json:"event"`
	CreatedAt string          `json:"createdAt"`
	BrandID   string          `json:"brandId"`
	Data      json.RawMessage `json:"data"`
}

func byName(t *testing.T) map[string]catalog.EventType {
	t.Helper()
	m := map[string]catalog.EventType{}
	for _, e := range catalog.Events() {
		m[e.Name] = e
	}
	return m
}

func TestEventsAreListedInDesignOrder(t *testing.T) {
	if got := catalog.Names(); !slices.Equal(got, designOrder) {
		t.Errorf("Names() = %v, want %v", got, designOrder)
	}
	var names []string
	for _, e := range catalog.Events() {
		names = append(names, e.Name)
		if len(e.Description) < 20 || len(e.Schema) == 0 || len(e.Example) == 0 {
			t.Errorf("%s: description %q, %d bytes of schema, %d of example", e.Name, e.Description, len(e.Schema), len(e.Example))
		}
		if !catalog.Known(e.Name) {
			t.Errorf("Known(%q) = false", e.Name)
		}
	}
	if !slices.Equal(names, designOrder) {
		t.Errorf("Events() names = %v, want %v", names, designOrder)
	}
	for _, name := range []string{"", "conversion.updated", "Conversion.Created", "conversion.created "} {
		if catalog.Known(name) {
			t.Errorf("Known(%q) = true", name)
		}
	}
}

func TestEventsReturnsCopies(t *testing.T) {
	first := catalog.Events()
	want := string(first[0].Schema)
	first[0].Schema[0], first[0].Example[0] = 'X', 'X'
	first[1].Name = "changed"
	again := catalog.Events()
	if string(again[0].Schema) != want || again[0].Example[0] != '{' || again[1].Name != designOrder[1] {
		t.Error("changing what Events returned changed the catalog")
	}
	env := catalog.EnvelopeSchema()
	env[0] = 'X'
	if catalog.EnvelopeSchema()[0] != '{' {
		t.Error("changing what EnvelopeSchema returned changed it")
	}
}

// The catalog serialises as the listing the route serves.
func TestListingJSON(t *testing.T) {
	raw, err := json.Marshal(catalog.Events())
	if err != nil {
		t.Fatal(err)
	}
	var listing []struct {
		Name, Description string
		Schema            map[string]any
		Example           map[string]any
	}
	if err := json.Unmarshal(raw, &listing); err != nil {
		t.Fatal(err)
	}
	if len(listing) != len(designOrder) || listing[0].Schema["$schema"] == nil || listing[0].Example["data"] == nil {
		t.Errorf("listing = %s", raw)
	}
}

// Test (1): every example is a valid envelope of its event, round-trips
// through the Go type of its data, and has consistent identifiers.
func TestExamplesValidate(t *testing.T) {
	for _, e := range catalog.Events() {
		t.Run(e.Name, func(t *testing.T) {
			if err := schemacheck.ValidateEnvelope(e.Example); err != nil {
				t.Fatalf("example: %v\n%s", err, e.Example)
			}
			var env envelope
			if err := json.Unmarshal(e.Example, &env); err != nil {
				t.Fatal(err)
			}
			if env.Event != e.Name {
				t.Errorf("example event = %q, want %q", env.Event, e.Name)
			}
			if err := schemacheck.ValidateData(e.Name, env.Data); err != nil {
				t.Errorf("example data: %v", err)
			}
			// The id is made at createdAt, as the service makes it.
			created, err := time.Parse(tally.TimeLayout, env.CreatedAt)
			if err != nil {
				t.Fatal(err)
			}
			u, err := ulid.ParseStrict(strings.TrimPrefix(env.ID, "evt_"))
			if err != nil || !ulid.Time(u.Time()).Equal(created) {
				t.Errorf("example id %s does not encode createdAt %s (%v)", env.ID, env.CreatedAt, err)
			}
			// The data decodes into the Go type without unknown fields and
			// encodes back to the same JSON.
			v := reflect.New(goTypes[e.Name])
			dec := json.NewDecoder(bytes.NewReader(env.Data))
			dec.DisallowUnknownFields()
			if err := dec.Decode(v.Interface()); err != nil {
				t.Fatalf("example data into %s: %v", goTypes[e.Name], err)
			}
			back, err := json.Marshal(v.Interface())
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, back, env.Data) {
				t.Errorf("example data through %s:\n got %s\nwant %s", goTypes[e.Name], back, env.Data)
			}
		})
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	return reflect.DeepEqual(x, y)
}

// eventConstants returns the values of the Event… string constants of
// tally.go.
func eventConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../tally.go", nil, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	for _, decl := range f.Decls {
		gen, ok := decl.(*ast.GenDecl)
		if !ok || gen.Tok != token.CONST {
			continue
		}
		for _, spec := range gen.Specs {
			vs := spec.(*ast.ValueSpec)
			for i, id := range vs.Names {
				if !strings.HasPrefix(id.Name, "Event") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("tally.go: %s is not a string literal; the catalog test cannot read it", id.Name)
					continue
				}
				consts[id.Name], _ = strconv.Unquote(lit.Value)
			}
		}
	}
	if len(consts) == 0 {
		t.Fatal("no Event… constants found in tally.go")
	}
	return consts
}

// Test (2): the catalog lists exactly the events tally.go names, so a new
// event cannot ship without a schema, nor a schema outlive its event.
func TestCatalogMatchesEventConstants(t *testing.T) {
	consts := eventConstants(t)
	inTally := map[string]bool{}
	for constName, name := range consts {
		inTally[name] = true
		if !catalog.Known(name) {
			t.Errorf("tally.%s = %q has no entry in the catalog (add schemas/%[2]s.json, examples/%[2]s.json and an entry in catalog.go)", constName, name)
		}
		if goTypes[name] == nil {
			t.Errorf("%s: no Go data type mapped in this test", name)
		}
	}
	for _, name := range catalog.Names() {
		if !inTally[name] {
			t.Errorf("catalog event %q is not an Event… constant of tally.go", name)
		}
	}
	// The envelope's event enum is the same list, in the same order.
	env := decodeSchema(t, catalog.EnvelopeSchema())
	var enum []string
	for _, v := range env.Properties["event"].Enum {
		enum = append(enum, v.(string))
	}
	if !slices.Equal(enum, catalog.Names()) {
		t.Errorf("envelope.json event enum = %v, want %v", enum, catalog.Names())
	}
}

const idPattern = `^%s[0-7][0-9a-hjkmnp-tv-z]{25}$`

// Every schema is strict and self-describing, and like-named properties are
// described alike.
func TestSchemasAreStrict(t *testing.T) {
	all := map[string][]byte{"envelope": catalog.EnvelopeSchema()}
	for _, e := range catalog.Events() {
		all[e.Name] = e.Schema
	}
	for name, raw := range all {
		s := decodeSchema(t, raw)
		if s.Schema != "https://json-schema.org/draft/2020-12/schema" {
			t.Errorf("%s: $schema = %q", name, s.Schema)
		}
		if s.Title == "" || s.Description == "" {
			t.Errorf("%s: no title or description", name)
		}
		if s.Type != "object" || s.AdditionalProperties == nil || *s.AdditionalProperties {
			t.Errorf("%s: want type object with additionalProperties false, got %s", name, raw)
		}
		for _, r := range s.Required {
			if s.Properties[r] == nil {
				t.Errorf("%s: required %q is not a property", name, r)
			}
		}
		for prop, p := range s.Properties {
			if p.Description == "" || p.Type == "" {
				t.Errorf("%s.%s: description %q, type %q", name, prop, p.Description, p.Type)
			}
			if prefix, ok := idPrefixes[prop]; ok {
				if want := strings.Replace(idPattern, "%s", prefix, 1); p.Pattern != want {
					t.Errorf("%s.%s: pattern %q, want %q", name, prop, p.Pattern, want)
				}
			} else if strings.HasSuffix(prop, "Id") && prop != "externalTxnId" {
				t.Errorf("%s.%s: an identifier property without a known prefix", name, prop)
			}
			switch {
			case strings.HasSuffix(prop, "Cents"):
				if p.Type != "integer" || p.Minimum == nil || *p.Minimum != 0 {
					t.Errorf("%s.%s: want an integer with minimum 0", name, prop)
				}
			case prop == "currency":
				if p.Pattern != "^[A-Z]{3}$" {
					t.Errorf("%s.currency: pattern %q", name, p.Pattern)
				}
			case prop == "status" || prop == "previousStatus" || prop == "reason" || prop == "cap":
				if len(p.Enum) == 0 {
					t.Errorf("%s.%s: no enum", name, prop)
				}
			case p.Type == "integer":
				if p.Minimum == nil {
					t.Errorf("%s.%s: integer without a minimum", name, prop)
				}
			}
		}
	}
}

// The identifier patterns accept exactly the lowercase identifiers that
// ids.Valid accepts.
func TestIDPatternMatchesIDs(t *testing.T) {
	re := regexp.MustCompile(decodeSchema(t, catalog.EnvelopeSchema()).Properties["id"].Pattern)
	now := time.Now()
	for i := range 200 {
		id := ids.New("evt_", now.Add(time.Duration(i)*time.Hour*997))
		if !re.MatchString(id) {
			t.Fatalf("pattern %s rejects %s from ids.New", re, id)
		}
	}
	const lower = "0123456789abcdefghijklmnopqrstuvwxyz"
	const crockford = "0123456789abcdefghjkmnpqrstvwxyz"
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		alphabet := lower
		if rng.IntN(2) == 0 {
			alphabet = crockford
		}
		b := make([]byte, 26)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		id := "evt_" + string(b)
		if re.MatchString(id) != ids.Valid("evt_", id) {
			t.Fatalf("%s: pattern says %v, ids.Valid says %v", id, re.MatchString(id), ids.Valid("evt_", id))
		}
	}
	for _, id := range []string{"evt_", "evt_01m81bd0m3yyv7eqya0hf2cyx", "evt_01m81bd0m3yyv7eqya0hf2cyx00", "evt_01M81BD0M3YYV7EQYA0HF2CYX0", "cnv_01m81bd0m3yyv7eqya0hf2cyx0"} {
		if re.MatchString(id) {
			t.Errorf("pattern accepts %q", id)
		}
	}
}

type jsonField struct {
	typ       reflect.Type
	omitempty bool
}

// jsonFields returns a struct type's fields by JSON name.
func jsonFields(typ reflect.Type) map[string]jsonField {
	fields := map[string]jsonField{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		fields[name] = jsonField{f.Type, strings.Contains(opts, "omitempty")}
	}
	return fields
}

// The schemas describe the Go types: every property is a field of the
// type, every field that is always written is a required property, and
// only omitempty fields may be missing from a schema.
func TestSchemasMatchGoTypes(t *testing.T) {
	kinds := map[reflect.Kind]string{reflect.String: "string", reflect.Int: "integer", reflect.Int64: "integer", reflect.Slice: "array"}
	for _, e := range catalog.Events() {
		s := decodeSchema(t, e.Schema)
		typ := goTypes[e.Name]
		fields := jsonFields(typ)
		for prop, p := range s.Properties {
			f, ok := fields[prop]
			if !ok {
				t.Errorf("%s: property %q is not a field of %s", e.Name, prop, typ)
				continue
			}
			if kinds[f.typ.Kind()] != p.Type {
				t.Errorf("%s.%s: schema type %q, Go type %s", e.Name, prop, p.Type, f.typ)
			}
			if !f.omitempty && !slices.Contains(s.Required, prop) {
				t.Errorf("%s.%s: %s always writes it, so it must be required", e.Name, prop, typ)
			}
		}
		for field, f := range fields {
			if s.Properties[field] == nil && !f.omitempty {
				t.Errorf("%s: %s field %q is always written but not in the schema", e.Name, typ, field)
			}
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Payloads built from the Go types validate, including those of the events
// the service does not emit yet (fraud.high_risk, webhook.test), so the
// types and the schemas cannot drift apart.
func TestPayloadsFromGoTypes(t *testing.T) {
	const (
		cnv = "cnv_01m81bd0m3bs9ndd1jhmp0k7a0"
		prt = "prt_01m6gw2pfep572tm8erazrp1fa"
		off = "off_01m3v9bbt0zkm6m8jzfz4kg8ky"
		clk = "clk_01m81bd0m36qf0xtnq3cv347km"
		sub = "sub_01m7fh87g018qagaf2ap5jzg6m"
	)
	conv := func(status, reason string) tally.ConversionEventData {
		return tally.ConversionEventData{ConversionID: cnv, PartnerID: prt, OfferID: off, RevenueCents: 0, PayoutCents: 1_000_000_000_000,
			Currency: "JPY", Status: status, Sub1: "", ExternalTxnID: "", Reason: reason}
	}
	partner := func(status, previous string) tally.PartnerEventData {
		return tally.PartnerEventData{PartnerID: prt, Name: "Jörg's Reviews", Email: "jörg@exämple.com", Status: status, PreviousStatus: previous}
	}
	banned := func(previous, reason, rule string) tally.PartnerEventData {
		d := partner("banned", previous)
		d.Reason, d.Rule = reason, rule
		return d
	}
	fraud := tally.FraudEventData{ClickID: clk, OfferID: off, PartnerID: prt, Score: 100, Threshold: 0,
		Signals: []string{"datacenter_ip", "blocked_ip", "bot_user_agent", "missing_user_agent", "ip_velocity"}, IP: "2001:db8::1", UserAgent: ""}
	noSignals := fraud
	noSignals.Signals, noSignals.IP, noSignals.Score, noSignals.Threshold, noSignals.UserAgent = []string{}, "198.51.100.7", 71, 70, "curl/8.5.0"
	nilSignals := fraud
	nilSignals.Signals = nil

	cases := []struct {
		event string
		data  any
		ok    bool
	}{
		{tally.EventConversionCreated, conv("pending", ""), true},
		{tally.EventConversionCreated, conv("approved", ""), true},
		{tally.EventConversionCreated, conv("rejected", ""), false},
		{tally.EventConversionCreated, conv("pending", "manual"), false}, // no reason on created
		{tally.EventConversionApproved, conv("approved", "manual"), true},
		{tally.EventConversionApproved, conv("approved", "hold_elapsed"), true},
		{tally.EventConversionApproved, conv("approved", ""), false}, // reason is required
		{tally.EventConversionApproved, conv("pending", "manual"), false},
		{tally.EventConversionRejected, conv("rejected", "manual"), true},
		{tally.EventConversionRejected, conv("rejected", "hold_elapsed"), false},
		{tally.EventPartnerApplied, partner("applied", ""), true},
		{tally.EventPartnerApplied, partner("applied", "applied"), false}, // no previousStatus on applied
		{tally.EventPartnerApproved, partner("active", "applied"), true},
		{tally.EventPartnerApproved, partner("active", ""), false},
		{tally.EventPartnerRejected, partner("rejected", "applied"), true},
		{tally.EventPartnerBanned, banned("applied", "manual", ""), true},
		{tally.EventPartnerBanned, banned("active", "automation", "fraud.high_risk_clicks"), true},
		{tally.EventPartnerBanned, banned("rejected", "manual", ""), true},
		{tally.EventPartnerBanned, banned("banned", "manual", ""), false},
		{tally.EventPartnerBanned, banned("active", "", ""), false},                             // reason is required
		{tally.EventPartnerBanned, banned("active", "automation", ""), false},                   // an automatic ban names its rule
		{tally.EventPartnerBanned, banned("active", "manual", "fraud.high_risk_clicks"), false}, // a manual one none
		{tally.EventPartnerApproved, func() tally.PartnerEventData { d := partner("active", "applied"); d.Reason = "manual"; return d }(), false},
		{tally.EventFraudHighRisk, fraud, true},
		{tally.EventFraudHighRisk, noSignals, true},
		// A nil Signals slice is written as null, which the schema refuses:
		// whoever emits fraud.high_risk must send an empty list instead.
		{tally.EventFraudHighRisk, nilSignals, false},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "daily", Limit: 1, Period: "2026-11-22", ConversionID: cnv}, true},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "weekly", Limit: 10, Period: "2026-W47", ConversionID: cnv}, true},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "weekly", Limit: 10, Period: "2020-W53", ConversionID: cnv}, true},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "monthly", Limit: 100, Period: "2026-11", ConversionID: cnv}, true},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "global", Limit: 1000, Period: "global", ConversionID: cnv}, true},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "daily", Limit: 1, Period: "daily#2026-11-22", ConversionID: cnv}, false},
		{tally.EventCapReached, tally.CapReachedEventData{OfferID: off, Cap: "global", Limit: 0, Period: "global", ConversionID: cnv}, false},
		{tally.EventWebhookTest, tally.WebhookTestEventData{SubscriptionID: sub, Message: "This is a test event from Tally."}, true},
		{tally.EventWebhookTest, tally.WebhookTestEventData{SubscriptionID: sub}, false},
	}
	for _, c := range cases {
		raw := mustJSON(t, c.data)
		if err := schemacheck.ValidateData(c.event, raw); (err == nil) != c.ok {
			t.Errorf("%s %s: err = %v, want ok = %v", c.event, raw, err, c.ok)
		}
	}
}

// mutate returns a copy of the example's data, changed by fn.
func mutate(t *testing.T, example []byte, fn func(data map[string]any)) []byte {
	t.Helper()
	var env map[string]any
	if err := json.Unmarshal(example, &env); err != nil {
		t.Fatal(err)
	}
	data := env["data"].(map[string]any)
	fn(data)
	return mustJSON(t, data)
}

func wantSchemaError(t *testing.T, what string, err error) {
	t.Helper()
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		t.Errorf("%s: err = %v, want a schema validation error", what, err)
	}
}

// Test (4), generically: each example broken in each way is refused.
func TestBrokenPayloadsAreRefused(t *testing.T) {
	for _, e := range catalog.Events() {
		s := decodeSchema(t, e.Schema)
		check := func(what string, fn func(map[string]any)) {
			t.Helper()
			data := mutate(t, e.Example, fn)
			wantSchemaError(t, e.Name+": "+what+": "+string(data), schemacheck.ValidateData(e.Name, data))
		}
		check("extra field", func(d map[string]any) { d["unexpected"] = true })
		check("extra field, empty", func(d map[string]any) { d["note"] = "" })
		for _, r := range s.Required {
			check("missing "+r, func(d map[string]any) { delete(d, r) })
		}
		for _, prop := range slices.Sorted(maps.Keys(s.Properties)) {
			p := s.Properties[prop]
			check(prop+" null", func(d map[string]any) { d[prop] = nil })
			check(prop+" object", func(d map[string]any) { d[prop] = map[string]any{} })
			switch p.Type {
			case "string":
				check(prop+" number", func(d map[string]any) { d[prop] = 42 })
			case "integer":
				check(prop+" string", func(d map[string]any) { d[prop] = "1" })
				check(prop+" fraction", func(d map[string]any) { d[prop] = 1.5 })
				check(prop+" below minimum", func(d map[string]any) { d[prop] = *p.Minimum - 1 })
				if p.Maximum != nil {
					check(prop+" above maximum", func(d map[string]any) { d[prop] = *p.Maximum + 1 })
				}
			case "array":
				check(prop+" string", func(d map[string]any) { d[prop] = "datacenter_ip" })
				check(prop+" unknown item", func(d map[string]any) { d[prop] = []any{"vpn"} })
				check(prop+" duplicate items", func(d map[string]any) { d[prop] = []any{"datacenter_ip", "datacenter_ip"} })
			}
			if len(p.Enum) > 0 {
				check(prop+" outside enum", func(d map[string]any) { d[prop] = "bogus" })
				check(prop+" upper case", func(d map[string]any) { d[prop] = strings.ToUpper(p.Enum[0].(string)) })
			}
			if prefix, ok := idPrefixes[prop]; ok {
				check(prop+" wrong prefix", func(d map[string]any) { d[prop] = "xyz_" + strings.TrimPrefix(d[prop].(string), prefix) })
				check(prop+" another resource's prefix", func(d map[string]any) {
					other := "brd_"
					if prefix == other {
						other = "prt_"
					}
					d[prop] = other + strings.TrimPrefix(d[prop].(string), prefix)
				})
				check(prop+" no prefix", func(d map[string]any) { d[prop] = strings.TrimPrefix(d[prop].(string), prefix) })
				check(prop+" upper case", func(d map[string]any) {
					d[prop] = prefix + strings.ToUpper(strings.TrimPrefix(d[prop].(string), prefix))
				})
				check(prop+" too short", func(d map[string]any) { d[prop] = d[prop].(string)[:len(d[prop].(string))-1] })
				check(prop+" not Crockford (u)", func(d map[string]any) { d[prop] = d[prop].(string)[:len(d[prop].(string))-1] + "u" })
				check(prop+" overflowing ULID", func(d map[string]any) { d[prop] = prefix + "8" + d[prop].(string)[len(prefix)+1:] })
			}
		}
	}
}

// Test (4), one by one: the rules that are particular to a field.
func TestParticularRules(t *testing.T) {
	ex := byName(t)
	cases := []struct {
		event string
		fn    func(map[string]any)
	}{
		{"conversion.created", func(d map[string]any) { d["currency"] = "usd" }},
		{"conversion.created", func(d map[string]any) { d["currency"] = "US" }},
		{"conversion.created", func(d map[string]any) { d["currency"] = "USDX" }},
		{"conversion.created", func(d map[string]any) { d["status"] = "rejected" }},
		{"conversion.created", func(d map[string]any) { d["reason"] = "manual" }},
		{"conversion.created", func(d map[string]any) { d["sub1"] = strings.Repeat("x", 256) }},
		{"conversion.created", func(d map[string]any) { d["externalTxnId"] = "ORD\n1" }},
		{"conversion.created", func(d map[string]any) { d["revenueCents"] = 1e3 + 0.5 }},
		{"conversion.approved", func(d map[string]any) { d["reason"] = "auto" }},
		{"conversion.approved", func(d map[string]any) { d["status"] = "pending" }},
		{"conversion.rejected", func(d map[string]any) { d["reason"] = "hold_elapsed" }},
		{"partner.applied", func(d map[string]any) { d["previousStatus"] = "applied" }},
		{"partner.applied", func(d map[string]any) { d["name"] = "" }},
		{"partner.applied", func(d map[string]any) { d["name"] = "   " }},
		{"partner.applied", func(d map[string]any) { d["name"] = strings.Repeat("n", 201) }},
		{"partner.applied", func(d map[string]any) { d["email"] = "not-an-email" }},
		{"partner.approved", func(d map[string]any) { d["previousStatus"] = "rejected" }},
		{"partner.banned", func(d map[string]any) { d["previousStatus"] = "banned" }},
		{"fraud.high_risk", func(d map[string]any) { d["score"] = 101 }},
		{"fraud.high_risk", func(d map[string]any) { d["threshold"] = -1 }},
		{"fraud.high_risk", func(d map[string]any) { d["ip"] = "not-an-ip" }},
		{"fraud.high_risk", func(d map[string]any) { d["ip"] = "999.1.1.1" }},
		{"fraud.high_risk", func(d map[string]any) { d["signals"] = nil }},
		{"cap.reached", func(d map[string]any) { d["period"] = "daily#2026-11-22" }},
		{"cap.reached", func(d map[string]any) { d["period"] = "2026-13-01" }},
		{"cap.reached", func(d map[string]any) { d["cap"], d["period"] = "weekly", "2026-11-22" }},
		{"cap.reached", func(d map[string]any) { d["cap"], d["period"] = "weekly", "2026-W54" }},
		{"cap.reached", func(d map[string]any) { d["cap"], d["period"] = "monthly", "2026-11-22" }},
		{"cap.reached", func(d map[string]any) { d["cap"], d["period"] = "global", "2026-11-22" }},
		{"cap.reached", func(d map[string]any) { d["cap"], d["period"] = "daily", "global" }},
		{"cap.reached", func(d map[string]any) { d["limit"] = 0 }},
		{"webhook.test", func(d map[string]any) { d["message"] = "" }},
	}
	for _, c := range cases {
		data := mutate(t, ex[c.event].Example, c.fn)
		wantSchemaError(t, c.event+" "+string(data), schemacheck.ValidateData(c.event, data))
	}

	if err := schemacheck.ValidateData("conversion.updated", []byte(`{}`)); !errors.Is(err, schemacheck.ErrUnknownEvent) {
		t.Errorf("unknown event: %v, want ErrUnknownEvent", err)
	}
	for _, raw := range []string{``, `{`, `{"a":1} {}`, `[]`, `null`, `"x"`} {
		if err := schemacheck.ValidateData("webhook.test", []byte(raw)); err == nil {
			t.Errorf("ValidateData(%q) = nil", raw)
		}
	}
}

// Test (4) for the envelope.
func TestBrokenEnvelopesAreRefused(t *testing.T) {
	ex := byName(t)
	base := ex["conversion.created"].Example
	partnerData := mutate(t, ex["partner.applied"].Example, func(map[string]any) {})
	change := func(fn func(env map[string]any)) []byte {
		var env map[string]any
		if err := json.Unmarshal(base, &env); err != nil {
			t.Fatal(err)
		}
		fn(env)
		return mustJSON(t, env)
	}
	cases := map[string][]byte{
		"no milliseconds":        change(func(e map[string]any) { e["createdAt"] = "2026-11-22T10:04:05Z" }),
		"microseconds":           change(func(e map[string]any) { e["createdAt"] = "2026-11-22T10:04:05.123456Z" }),
		"offset instead of Z":    change(func(e map[string]any) { e["createdAt"] = "2026-11-22T10:04:05.123+00:00" }),
		"lower-case z":           change(func(e map[string]any) { e["createdAt"] = "2026-11-22T10:04:05.123z" }),
		"no time":                change(func(e map[string]any) { e["createdAt"] = "2026-11-22" }),
		"month 13":               change(func(e map[string]any) { e["createdAt"] = "2026-13-22T10:04:05.123Z" }),
		"February 30":            change(func(e map[string]any) { e["createdAt"] = "2026-02-30T10:04:05.123Z" }),
		"unix time":              change(func(e map[string]any) { e["createdAt"] = 1795341845 }),
		"id of a conversion":     change(func(e map[string]any) { e["id"] = "cnv_01m81bd0m3yyv7eqya0hf2cyx0" }),
		"id without prefix":      change(func(e map[string]any) { e["id"] = "01m81bd0m3yyv7eqya0hf2cyx0" }),
		"id too long":            change(func(e map[string]any) { e["id"] = "evt_01m81bd0m3yyv7eqya0hf2cyx00" }),
		"bad brand id":           change(func(e map[string]any) { e["brandId"] = "brand_1" }),
		"brand id of a partner":  change(func(e map[string]any) { e["brandId"] = "prt_01kerpxzm03071w8v0mdmje1eh" }),
		"unknown event":          change(func(e map[string]any) { e["event"] = "conversion.updated" }),
		"event not a string":     change(func(e map[string]any) { e["event"] = 1 }),
		"data an array":          change(func(e map[string]any) { e["data"] = []any{} }),
		"data null":              change(func(e map[string]any) { e["data"] = nil }),
		"data a string":          change(func(e map[string]any) { e["data"] = "{}" }),
		"data missing":           change(func(e map[string]any) { delete(e, "data") }),
		"event missing":          change(func(e map[string]any) { delete(e, "event") }),
		"id missing":             change(func(e map[string]any) { delete(e, "id") }),
		"createdAt missing":      change(func(e map[string]any) { delete(e, "createdAt") }),
		"brandId missing":        change(func(e map[string]any) { delete(e, "brandId") }),
		"extra envelope field":   change(func(e map[string]any) { e["apiVersion"] = "1" }),
		"data of another event":  change(func(e map[string]any) { e["data"] = json.RawMessage(partnerData) }),
		"data with an extra":     change(func(e map[string]any) { e["data"].(map[string]any)["extra"] = 1 }),
		"data missing a field":   change(func(e map[string]any) { delete(e["data"].(map[string]any), "currency") }),
		"data with a wrong type": change(func(e map[string]any) { e["data"].(map[string]any)["payoutCents"] = "750" }),
		"data with a bad id":     change(func(e map[string]any) { e["data"].(map[string]any)["offerId"] = "offer_1" }),
		"empty event name":       change(func(e map[string]any) { e["event"] = "" }),
		"an array":               []byte(`[]`),
		"null":                   []byte(`null`),
		"not JSON":               []byte(`{"id":`),
		"trailing content":       append(bytes.Clone(base), []byte(` {}`)...),
	}
	for what, raw := range cases {
		if err := schemacheck.ValidateEnvelope(raw); err == nil {
			t.Errorf("%s: ValidateEnvelope accepted %s", what, raw)
		}
	}
	if err := schemacheck.ValidateEnvelope(base); err != nil {
		t.Errorf("the unchanged example: %v", err)
	}
}
