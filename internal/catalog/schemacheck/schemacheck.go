// Package schemacheck checks webhook payloads against the JSON Schemas
// (draft 2020-12) of package catalog, compiled once on first use. The tests
// use it to keep the schemas, the Go types in package tally and what the
// service emits in step; no Lambda function links it.
package schemacheck

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tally-hq/tally/internal/catalog"
)

// ErrUnknownEvent is returned (wrapped) for an event name not in the catalog.
var ErrUnknownEvent = errors.New("unknown webhook event")

type compiled struct {
	schemas  map[string]*jsonschema.Schema
	envelope *jsonschema.Schema
}

// load compiles the catalog's schemas. A failure is a mistake in the
// catalog's files, which the tests catch, so it panics.
var load = sync.OnceValue(func() *compiled {
	c, err := compile()
	if err != nil {
		panic("schemacheck: " + err.Error())
	}
	return c
})

func compile() (*compiled, error) {
	comp := jsonschema.NewCompiler()
	comp.DefaultDraft(jsonschema.Draft2020)
	comp.AssertFormat() // date-time and ipv4/ipv6 are checked, not only noted (the library does not know idn-email)
	add := func(name string, raw []byte) (*jsonschema.Schema, error) {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("schemas/%s.json: %w", name, err)
		}
		url := "urn:tally:webhook-events:" + name
		if err := comp.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("schemas/%s.json: %w", name, err)
		}
		return comp.Compile(url)
	}
	c := &compiled{schemas: map[string]*jsonschema.Schema{}}
	var err error
	if c.envelope, err = add("envelope", catalog.EnvelopeSchema()); err != nil {
		return nil, err
	}
	for _, e := range catalog.Events() {
		if c.schemas[e.Name], err = add(e.Name, e.Schema); err != nil {
			return nil, err
		}
	}
	return c, nil
}

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
