package service_test

import (
	"bytes"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// On AWS a conversion's conversion.created is not stored: each attempt of
// its deliveries makes the envelope again from the conversion as it is
// then (conversions.CreatedEvent), which must be the one it was recorded
// with. So every change a conversion goes through is undone by
// conversions.AsCreated: here each, by the event it emits (a new kind of
// change to a conversion emits a conversion.* event of its own, and fails
// this test until it has a case), compared field by field, so that a field
// a change sets and AsCreated does not undo fails it too.
func TestEveryConversionChangeIsUndoneAsCreated(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		p := f.partner(true)
		auto := f.offer(tally.ApprovalAuto, 0, tally.Caps{})
		manual := f.offer(tally.ApprovalManual, 0, tally.Caps{})
		held := f.offer(tally.ApprovalManual, 1, tally.Caps{})
		reverse := func(c tally.Conversion) error {
			_, err := f.svc.Conversions.ReverseConversion(f.ctx, f.brandID, c.ID, conversions.ReversalInput{Reason: ptr(tally.ReversalRefund), Note: ptr("returned")})
			return err
		}
		approve := func(c tally.Conversion) error {
			_, err := f.svc.Conversions.ApproveConversion(f.ctx, f.brandID, c.ID)
			return err
		}
		type change struct {
			name   string
			event  string // what the change emits
			offer  tally.Offer
			change func(c tally.Conversion) error
		}
		cases := []change{
			// In the millisecond it was recorded: still an approval after
			// the record, not one on creation.
			{"approved at once", tally.EventConversionApproved, manual, approve},
			{"approved when its hold elapsed", tally.EventConversionApproved, held, func(tally.Conversion) error {
				f.clock.Advance(2 * time.Hour)
				_, err := f.svc.Conversions.ApproveDue(f.ctx)
				return err
			}},
			{"rejected", tally.EventConversionRejected, manual, func(c tally.Conversion) error {
				f.clock.Advance(time.Minute)
				_, err := f.svc.Conversions.RejectConversion(f.ctx, f.brandID, c.ID)
				return err
			}},
			{"reversed, approved on creation", tally.EventConversionReversed, auto, func(c tally.Conversion) error {
				f.clock.Advance(time.Minute)
				return reverse(c)
			}},
			{"approved, then reversed", tally.EventConversionReversed, held, func(c tally.Conversion) error {
				f.clock.Advance(time.Minute)
				if err := approve(c); err != nil {
					return err
				}
				f.clock.Advance(time.Minute)
				return reverse(c)
			}},
		}
		for _, name := range catalog.Names() {
			if strings.HasPrefix(name, "conversion.") && name != tally.EventConversionCreated &&
				!slices.ContainsFunc(cases, func(c change) bool { return c.event == name }) {
				t.Errorf("%s changes a conversion and has no case here: give it one", name)
			}
		}
		for _, tc := range cases {
			recorded := f.convert(tc.offer.ID, p.ID, conversions.ConversionInput{Sub1: ptr("s1"), Sub2: ptr("s2"), ExternalTxnID: ptr("as-created-" + tc.name)})
			if stored := f.stored(recorded.ID); !reflect.DeepEqual(conversions.AsCreated(stored), stored) {
				t.Errorf("%s: a conversion just recorded is not as created:\n got %+v\nwant %+v", tc.name, conversions.AsCreated(stored), stored)
			}
			if err := tc.change(recorded); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			changed := f.stored(recorded.ID)
			if changed.Status == recorded.Status && changed.UpdatedAt == recorded.UpdatedAt {
				t.Fatalf("%s: the conversion did not change: %+v", tc.name, changed)
			}
			// approveAt is cleared by a decision, and is in no event.
			want, got := recorded, conversions.AsCreated(changed)
			want.ApproveAt, got.ApproveAt = nil, nil
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: as created\n got %+v\nwant %+v", tc.name, got, want)
			}
			if got, want := records.MustJSON(conversions.CreatedEvent(changed)), records.MustJSON(conversions.CreatedEvent(recorded)); !bytes.Equal(got, want) {
				t.Errorf("%s: conversion.created made after the change:\n%s\nwant\n%s", tc.name, got, want)
			}
			// The local server stores its conversion.created, written with
			// the conversion: the same data.
			i := slices.IndexFunc(f.events(tally.EventConversionCreated), func(e tally.Event) bool {
				return bytes.Contains(e.Data, []byte(`"conversionId":"`+recorded.ID+`"`))
			})
			if i < 0 {
				t.Fatalf("%s: no conversion.created stored", tc.name)
			}
			if got, stored := conversions.CreatedEvent(changed).Data, f.events(tally.EventConversionCreated)[i].Data; !bytes.Equal(got, stored) {
				t.Errorf("%s: conversion.created made from the conversion has data\n%s\nthe stored event's\n%s", tc.name, got, stored)
			}
		}
	})
}

// stored reads one of the brand's conversions.
func (f *fixture) stored(id string) tally.Conversion {
	f.t.Helper()
	c, err := f.svc.Conversions.Conversion(f.ctx, f.brandID, id)
	if err != nil {
		f.t.Fatal(err)
	}
	return c
}
