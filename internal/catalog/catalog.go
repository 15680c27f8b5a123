// Package catalog is the published list of Tally's webhook events: for each
// event its name, a description, the JSON Schema (draft 2020-12) of its
// data and an example delivery. GET /api/public/webhook-events serves it.
//
// The schemas are the files in schemas/ (one per event, named after it, and
// envelope.json for the delivery body); the examples are in examples/. Both
// are embedded and compiled once, on first use. ValidateData and
// ValidateEnvelope check payloads against them, which is how the tests keep
// the schemas, the Go types in package tally and what the service emits in
// step.
package catalog

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tally-hq/tally"
)

// EventType describes one webhook event.
type EventType struct {
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"`  // JSON Schema 2020-12 of the event's data
	Example     json.RawMessage `json:"example"` // a full envelope: {id, event, createdAt, brandId, data}
}

// events lists every event in the order DESIGN.md names them. An event needs
// schemas/<name>.json and examples/<name>.json next to its entry here.
var events = []eventEntry{
	{tally.EventConversionCreated, "A conversion was recorded. Its status is approved when the offer approves conversions " +
		"automatically, or pending when the offer needs a decision; a conversion.approved or conversion.rejected event " +
		"follows that decision. A repeated postback with the same externalTxnId records nothing and sends no event."},
	{tally.EventConversionApproved, "A pending conversion was approved: by the brand (reason manual), or automatically " +
		"when the offer's hold time elapsed (reason hold_elapsed)."},
	{tally.EventConversionRejected, "A pending conversion was rejected by the brand (reason manual). Its revenue and " +
		"payout no longer count in reports."},
	{tally.EventPartnerApplied, "Someone submitted the brand's public partner application form. The new partner is " +
		"applied and waits for the brand to approve or reject it."},
	{tally.EventPartnerApproved, "An applied partner was approved and is now active: its clicks and conversions are accepted."},
	{tally.EventPartnerRejected, "A partner's application was turned down; the partner is rejected."},
	{tally.EventPartnerBanned, "A partner was banned, manually or by an automation rule, from any other status. Its " +
		"clicks and conversions are refused from now on."},
	{tally.EventFraudHighRisk, "A click's fraud score exceeded the brand's threshold. The signals say what raised the " +
		"score: the scoring model's high-risk rating, a datacenter IP, or an IP on a list of known bad addresses."},
	{tally.EventCapReached, "A conversion brought an offer to one of its caps (daily, weekly, monthly or global). Sent " +
		"once per cap and period; further conversions for the offer in that period are refused with cap_reached."},
	{tally.EventWebhookTest, "A test event, sent on request (POST /api/public/webhooks/:id/test) to that one " +
		"subscription whatever events it lists, to check the receiver and its signature verification."},
}

type eventEntry struct{ name, description string }

//go:embed schemas/*.json examples/*.json
var files embed.FS

// ErrUnknownEvent is returned (wrapped) for an event name not in the catalog.
var ErrUnknownEvent = errors.New("unknown webhook event")

type compiled struct {
	types    []EventType
	schemas  map[string]*jsonschema.Schema
	envelope *jsonschema.Schema
	envRaw   json.RawMessage
}

// load reads and compiles the embedded files. A failure is a mistake in this
// package's files, which the tests catch, so it panics.
var load = sync.OnceValue(func() *compiled {
	c, err := compile()
	if err != nil {
		panic("catalog: " + err.Error())
	}
	return c
})

func compile() (*compiled, error) {
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.AssertFormat() // date-time and ipv4/ipv6 are checked, not only noted (the library does not know idn-email)
	add := func(name string) (json.RawMessage, string, error) {
		raw, err := files.ReadFile("schemas/" + name + ".json")
		if err != nil {
			return nil, "", err
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, "", fmt.Errorf("schemas/%s.json: %w", name, err)
		}
		url := "urn:tally:webhook-events:" + name
		if err := comp.AddResource(url, doc); err != nil {
			return nil, "", fmt.Errorf("schemas/%s.json: %w", name, err)
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, "", err
		}
		return b.Bytes(), url, nil
	}

	c := &compiled{schemas: map[string]*jsonschema.Schema{}}
	envRaw, envURL, err := add("envelope")
	if err != nil {
		return nil, err
	}
	if c.envelope, err = comp.Compile(envURL); err != nil {
		return nil, err
	}
	c.envRaw = envRaw
	for _, e := range events {
		raw, url, err := add(e.name)
		if err != nil {
			return nil, err
		}
		if c.schemas[e.name], err = comp.Compile(url); err != nil {
			return nil, err
		}
		example, err := files.ReadFile("examples/" + e.name + ".json")
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := json.Compact(&b, example); err != nil {
			return nil, fmt.Errorf("examples/%s.json: %w", e.name, err)
		}
		c.types = append(c.types, EventType{Name: e.name, Description: e.description, Schema: raw, Example: b.Bytes()})
	}
	return c, nil
}

// Events returns every webhook event, in the order DESIGN.md lists them.
// The caller may modify the result.
func Events() []EventType {
	types := load().types
	out := make([]EventType, len(types))
	for i, t := range types {
		out[i] = EventType{Name: t.Name, Description: t.Description, Schema: bytes.Clone(t.Schema), Example: bytes.Clone(t.Example)}
	}
	return out
}

// Names returns the event names, in the order of Events.
func Names() []string {
	names := make([]string, len(events))
	for i, e := range events {
		names[i] = e.name
	}
	return names
}

// Known reports whether name is a webhook event.
func Known(name string) bool {
	return slices.ContainsFunc(events, func(e eventEntry) bool { return e.name == name })
}

// EnvelopeSchema returns the JSON Schema of the delivery body, whose data
// is then checked against the schema of its event.
func EnvelopeSchema() json.RawMessage { return bytes.Clone(load().envRaw) }

// ValidateData checks data, the JSON of an event's data object, against the
// schema of the event name. Errors wrap ErrUnknownEvent or a
// *jsonschema.ValidationError.
func ValidateData(name string, data []byte) error {
	c := load()
	if c.schemas[name] == nil {
		return fmt.Errorf("%w %q", ErrUnknownEvent, name)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s data is not valid JSON: %w", name, err)
	}
	return validateData(c, name, v)
}

func validateData(c *compiled, name string, v any) error {
	sch, ok := c.schemas[name]
	if !ok {
		return fmt.Errorf("%w %q", ErrUnknownEvent, name)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s data does not match its schema: %w", name, err)
	}
	return nil
}

// ValidateEnvelope checks a whole delivery body: the envelope (id, event,
// createdAt, brandId, data and nothing else), then data against the schema
// of event.
func ValidateEnvelope(raw []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("envelope is not valid JSON: %w", err)
	}
	c := load()
	if err := c.envelope.Validate(v); err != nil {
		return fmt.Errorf("envelope does not match its schema: %w", err)
	}
	obj := v.(map[string]any) // the envelope schema requires an object with these members
	return validateData(c, obj["event"].(string), obj["data"])
}
