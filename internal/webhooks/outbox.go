package webhooks

import (
	"context"
	"errors"
	"strings"
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

// outboxAttr, on an event made from the stream, names the conversion whose
// outbox entry it leaves when its deliveries are written.
const outboxAttr = "outbox"

// createdEvent is a conversion's conversion.created event as the fan-out
// makes it from the stream: the same for the same conversion (its id is
// derived from the conversion's), so a repeated or re-driven fan-out
// writes the same item. It is in no index (the events list, read by tests
// and inspection, does not show it). It keeps the span the conversion's
// item (or outbox entry) kept, read as from.
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
// it has its outbox key (gsi3), or it was made from the stream and names
// its conversion's outbox entry (which may be gone already: leaving it
// again costs a delete).
func inOutbox(event store.Item) bool {
	return event.GSI3 != (store.IndexKey{}) || event.Attrs[outboxAttr] != ""
}

// outboxedConversion is outboxedConversions for one entry: the id of its
// event, or "" when the entry was deleted.
func (s *Engine) outboxedConversion(ctx context.Context, it store.Item) (string, error) {
	var c tally.Conversion
	if err := records.Decode(it, &c); err != nil {
		return "", err
	}
	_, err := s.db.Get(ctx, keys.Conversion(c.BrandID, c.ID))
	switch {
	case errors.Is(err, store.ErrNotFound):
		err = s.db.Transact(ctx, store.Delete(it.Key, store.AttrEquals("at", it.Attrs["at"])))
		if _, rewritten := store.FailedOp(err); rewritten {
			err = nil // a retry of the request is completing it
		}
		return "", err
	case err != nil:
		return "", err
	}
	evt, err := s.writeCreatedEvent(ctx, c, it)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(evt.PK, "EVT#"), nil
}
