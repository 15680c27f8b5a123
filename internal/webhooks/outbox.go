package webhooks

import (
	"context"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/trace"
)

// outboxAttr, on an event made from the stream, names the conversion it
// was made from; the fan-out's stream filter passes no event that has it.
const outboxAttr = "outbox"

// createdEvent is a conversion's conversion.created event as the fan-out
// makes it from the stream: the same for the same conversion (its id is
// derived from the conversion's), so a repeated or re-driven fan-out
// writes the same item. It is in no index (the events list, read by tests
// and inspection, does not show it). It keeps the span the conversion's
// item kept, read as from.
func createdEvent(c tally.Conversion, from store.Item, deliveryRetention time.Duration) store.Item {
	evt := tally.Event{
		ID:    ids.Derived("evt_", c.CreatedAt.Time, tally.EventConversionCreated+"/"+c.ID),
		Event: tally.EventConversionCreated, CreatedAt: c.CreatedAt, BrandID: c.BrandID,
		Data: records.MustJSON(conversions.EventData(c, "")),
	}
	attrs := map[string]string{"type": evt.Event, "brandId": c.BrandID, outboxAttr: c.ID}
	if span := from.Attrs[trace.Attr]; span != "" {
		attrs[trace.Attr] = span
	}
	return store.Item{
		Key:       keys.Event(evt.ID),
		Attrs:     attrs,
		Data:      records.MustJSON(evt),
		ExpiresAt: c.CreatedAt.Add(outbox.Keep(deliveryRetention)).Unix(), // deliveries read their envelope from it
	}
}

// writeCreatedEvent writes c's conversion.created event (createdEvent).
func (s *Engine) writeCreatedEvent(ctx context.Context, c tally.Conversion, from store.Item) (store.Item, error) {
	evt := createdEvent(c, from, s.deliveryRetention)
	return evt, s.db.Transact(ctx, store.Put(evt))
}

// DispatchConversion is Dispatch for a conversion the stream shows
// inserted (a new image marked by conversions.ForStream): it writes the
// conversion's conversion.created event and dispatches it, with the
// batch's reads (nil: its own).
func (s *Engine) DispatchConversion(ctx context.Context, conversion store.Item, reads *Reads) ([]DeliveryMessage, error) {
	var c tally.Conversion
	if err := records.Decode(conversion, &c); err != nil {
		return nil, err
	}
	evt, err := s.writeCreatedEvent(ctx, c, conversion)
	if err != nil {
		return nil, err
	}
	return s.dispatch(ctx, evt, reads)
}

// inOutbox says whether an event's deliveries may not all be written yet:
// it has its outbox key (gsi3).
func inOutbox(event store.Item) bool {
	return event.GSI3 != (store.IndexKey{})
}

// fromStream says whether the fan-out made the event from the stream
// (createdEvent): it is in no outbox, and a fan-out of it that failed is
// made again from FanoutDLQ (StreamConversions).
func fromStream(event store.Item) bool {
	return event.Attrs[outboxAttr] != ""
}
