package webhooks

import (
	"context"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/trace"
)

// conversionAttr, on a conversion.created made from its conversion and
// not stored (createdEvent), names the conversion: its deliveries name it
// too (endpoints.DeliveryRecord.Conversion), and each attempt makes the
// envelope from it again (endpoints.Envelope).
const conversionAttr = "conversion"

// createdEvent is a conversion's conversion.created as the fan-out makes it
// from the conversion's item (conversions.CreatedEvent), not stored: the
// same, byte for byte, whenever it is made, whatever the conversion became
// since, so that a repeated or re-driven fan-out makes the same deliveries.
// It keeps the span the item kept, read as from.
func createdEvent(c tally.Conversion, from store.Item) store.Item {
	evt := conversions.CreatedEvent(c)
	attrs := map[string]string{"type": evt.Event, "brandId": c.BrandID, conversionAttr: c.ID}
	if span := from.Attrs[trace.Attr]; span != "" {
		attrs[trace.Attr] = span
	}
	return store.Item{Key: keys.Event(evt.ID), Attrs: attrs, Data: records.MustJSON(evt)}
}

// DispatchConversion is Dispatch for a conversion the stream shows
// inserted (a new image marked by conversions.ForStream), or that the
// reconciler read again (StreamConversions): it makes the conversion's
// conversion.created event (createdEvent), keeping the span the item
// kept, and dispatches it, with the batch's reads (nil: its own).
func (s *Engine) DispatchConversion(ctx context.Context, conversion store.Item, reads *Reads) ([]DeliveryMessage, error) {
	var c tally.Conversion
	if err := records.Decode(conversion, &c); err != nil {
		return nil, err
	}
	return s.dispatch(ctx, createdEvent(c, conversion), reads)
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
	return event.Attrs[conversionAttr] != ""
}
