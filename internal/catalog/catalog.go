// Package catalog is the published list of Tally's webhook events: for each
// event its name, a description, the JSON Schema (draft 2020-12) of its
// data and an example delivery. GET /api/public/webhook-events serves it.
//
// The schemas are the files in schemas/ (one per event, named after it, and
// envelope.json for the delivery body); the examples are in examples/. Both
// are embedded. Package schemacheck checks payloads against them, which is
// how the tests keep the schemas, the Go types in package tally and what the
// service emits in step; the service itself only serves the schemas, so it
// does not link a JSON Schema validator.
package catalog

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

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
	{tally.EventPartnerBanned, "A partner was banned, manually (reason manual) or by an automation rule (reason " +
		"automation, with the rule), from any other status. Its clicks and conversions are refused from now on."},
	{tally.EventFraudHighRisk, "A click's fraud score exceeded the brand's threshold. The signals say what raised the " +
		"score: a datacenter IP, an IP the brand blocked, a bot's or a missing User-Agent, or many clicks from one IP on " +
		"one offer in a minute. The click was still recorded and redirected."},
	{tally.EventCapReached, "A conversion brought an offer to one of its caps (daily, weekly, monthly or global). Sent " +
		"once per cap and period; further conversions for the offer in that period are refused with cap_reached."},
	{tally.EventWebhookTest, "A test event, sent on request (POST /api/public/webhooks/:id/test) to that one " +
		"subscription whatever events it lists, to check the receiver and its signature verification."},
	{tally.EventConversionReversed, "An approved conversion was reversed by the brand (a refund, a chargeback, fraud): " +
		"reversalReason says why. Its revenue and payout no longer count in reports, and its payout leaves the partner's " +
		"owed balance (a clawback from the next payout when a payout already included it)."},
	{tally.EventPartnerReactivated, "A rejected or banned partner was reinstated by the brand and is active again: its " +
		"clicks and conversions are accepted. After a ban by the automation rule, the rule counts high-risk clicks from " +
		"the reactivation on."},
	{tally.EventPayoutPaid, "The brand marked a payout paid (it pays partners by its own means): each line's amount " +
		"moves from the partner's inPayout balance to paid."},
}

type eventEntry struct{ name, description string }

//go:embed schemas/*.json examples/*.json
var files embed.FS

// load reads the embedded files once. A failure is a mistake in this
// package's files, which the tests catch, so it panics.
var load = sync.OnceValue(func() catalogFiles {
	c, err := read()
	if err != nil {
		panic("catalog: " + err.Error())
	}
	return c
})

type catalogFiles struct {
	types    []EventType
	envelope json.RawMessage
}

func read() (catalogFiles, error) {
	var c catalogFiles
	compact := func(path string) (json.RawMessage, error) {
		raw, err := files.ReadFile(path)
		if err != nil {
			return nil, err
		}
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return b.Bytes(), nil
	}
	var err error
	if c.envelope, err = compact("schemas/envelope.json"); err != nil {
		return c, err
	}
	for _, e := range events {
		schema, err := compact("schemas/" + e.name + ".json")
		if err != nil {
			return c, err
		}
		example, err := compact("examples/" + e.name + ".json")
		if err != nil {
			return c, err
		}
		c.types = append(c.types, EventType{Name: e.name, Description: e.description, Schema: schema, Example: example})
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

// Subscribable are the events a subscription may list: all but
// webhook.test, which only the test button sends.
func Subscribable() []EventType {
	return slices.DeleteFunc(Events(), func(t EventType) bool { return t.Name == "webhook.test" })
}

// Known reports whether name is a webhook event.
func Known(name string) bool {
	return slices.ContainsFunc(events, func(e eventEntry) bool { return e.name == name })
}

// EnvelopeSchema returns the JSON Schema of the delivery body, whose data
// is then checked against the schema of its event.
func EnvelopeSchema() json.RawMessage { return bytes.Clone(load().envelope) }
