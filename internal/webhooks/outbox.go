package webhooks

import (
	"context"
	"errors"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/trace"
)

// outboxAttr, on an event made from the stream, names the conversion whose
// outbox entry it leaves when its deliveries are written.
const outboxAttr = "outbox"

// conversionAttr, on a conversion.created made from its conversion and
// not stored (createdEvent), names the conversion: its deliveries name it
// too (endpoints.DeliveryRecord.Conversion), and each attempt makes the
// envelope from it again (endpoints.Envelope).
const conversionAttr = "conversion"

// createdEvent is a conversion's conversion.created as the fan-out makes it
// from the conversion's item (conversions.CreatedEvent), not stored: the
// same, byte for byte, whenever it is made, whatever the conversion became
// since, so that a repeated or re-driven fan-out makes the same deliveries.
// It keeps the span the item (or outbox entry) kept, read as from.
func createdEvent(c tally.Conversion, from store.Item) store.Item {
	evt := conversions.CreatedEvent(c)
	attrs := map[string]string{"type": evt.Event, "brandId": c.BrandID, outboxAttr: c.ID, conversionAttr: c.ID}
	if span := from.Attrs[trace.Attr]; span != "" {
		attrs[trace.Attr] = span
	}
	return store.Item{Key: keys.Event(evt.ID), Attrs: attrs, Data: records.MustJSON(evt)}
}

// DispatchConversion is Dispatch for a conversion the stream shows
// inserted (a new image marked by conversions.ForStream): it makes the
// conversion's conversion.created event (createdEvent) and dispatches it,
// with the batch's reads (nil: its own).
func (s *Engine) DispatchConversion(ctx context.Context, conversion store.Item, reads *Reads) ([]DeliveryMessage, error) {
	return s.dispatchCreated(ctx, conversion, conversion, reads)
}

// DispatchOutboxed is DispatchConversion for a conversion the reconciler
// found in the outbox (Dropped.Conversions), its event keeping the span
// its outbox entry kept.
func (s *Engine) DispatchOutboxed(ctx context.Context, o Outboxed, reads *Reads) ([]DeliveryMessage, error) {
	return s.dispatchCreated(ctx, o.Conversion, o.Entry, reads)
}

// dispatchCreated dispatches the conversion.created of the conversion's
// item, its span from the item from.
func (s *Engine) dispatchCreated(ctx context.Context, conversion, from store.Item, reads *Reads) ([]DeliveryMessage, error) {
	var c tally.Conversion
	if err := records.Decode(conversion, &c); err != nil {
		return nil, err
	}
	return s.dispatch(ctx, createdEvent(c, from), reads)
}

// inOutbox says whether an event's deliveries may not all be written yet:
// it has its outbox key (gsi3), or it was made from the stream and names
// its conversion's outbox entry (which may be gone already: leaving it
// again costs a delete).
func inOutbox(event store.Item) bool {
	return event.GSI3 != (store.IndexKey{}) || event.Attrs[outboxAttr] != ""
}

// outboxedConversion is outboxedConversions for one entry: its conversion
// to fan out again, or false when the entry was deleted.
func (s *Engine) outboxedConversion(ctx context.Context, it store.Item) (Outboxed, bool, error) {
	var c tally.Conversion
	if err := records.Decode(it, &c); err != nil {
		return Outboxed{}, false, err
	}
	conversion, err := s.db.Get(ctx, keys.Conversion(c.BrandID, c.ID))
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = s.db.Transact(ctx, store.Delete(it.Key, store.AttrEquals("at", it.Attrs["at"])))
		if _, rewritten := store.FailedOp(err); rewritten {
			err = nil // a retry of the request is completing it
		}
		return Outboxed{}, false, err
	case err != nil:
		return Outboxed{}, false, err
	}
	return Outboxed{Entry: it, Conversion: conversion}, true, nil
}

// Outboxed is a conversion in the outbox whose conversion.created the
// reconciler fans out again (DispatchOutboxed): its item as read, and its
// outbox entry, on which a failure is recorded (SkipOutboxed).
type Outboxed struct {
	Entry, Conversion store.Item
}

// SkipOutboxed records that the reconciler could not re-drive the
// conversion o (skip): its outbox entry is passed over until its backoff
// ends.
func (s *Engine) SkipOutboxed(ctx context.Context, o Outboxed, cause error) Skipped {
	return skip(ctx, s.db, o.Entry, cause)
}
