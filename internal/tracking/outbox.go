package tracking

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// WithStreamConversions writes new conversions as the AWS wiring wants them
// (lambdafn.Setup; docs/aws.md, "Cost of the webhook pipeline"), where each
// item of a transaction bills twice and the table's stream carries every
// insert to the fan-out:
//
//   - the offer's and the partner's status are read, strongly consistent,
//     right before the write, not checked in it (a conversion racing a
//     pause or a ban by milliseconds is accepted, as if it had come just
//     before; docs/decisions.md);
//   - a conversion without caps and without clickId is written as up to
//     three conditional puts, no transaction: its idempotency marker
//     (holding the whole conversion), its outbox entry, the conversion. A
//     request that finds the marker completes what a crash between them
//     left (replay); caps and clickId keep the transaction, which their
//     counters and the click's update need;
//   - its conversion.created event is not written by the request: the
//     fan-out makes it from the conversion's insert in the stream
//     (DispatchConversion), and the conversion's outbox entry, an item in
//     no index, keeps it recoverable until its deliveries are written
//     (Overdue).
//
// The local server (either store) keeps the one transaction with the
// event: its pipeline drains the outbox index, not a stream.
func WithStreamConversions() Option { return func(s *Service) { s.streamConversions = true } }

// fanOutAttr marks a conversion item whose event the fan-out makes from the
// stream (the fan-out's stream filter passes its insert).
const (
	fanOutAttr       = "fanout"
	fanOutFromStream = "stream"
)

// outboxAttr, on an event made from the stream, names the conversion whose
// outbox entry it leaves when its deliveries are written.
const outboxAttr = "outbox"

// newConversionItem is the item of a new conversion, marked for what the
// stream does with it.
func (s *Service) newConversionItem(c tally.Conversion) store.Item {
	item := conversionItem(c)
	s.rollups.MarkConversion(&item)
	if s.streamConversions {
		item.Attrs[fanOutAttr] = fanOutFromStream
	}
	return item
}

// outboxEntry is a conversion's outbox entry: the conversion as created
// (its event is made from it when the stream's record of the conversion was
// lost), and when it was written ("at", the wall clock), so that the
// reconciler leaves an entry a retry completing an older conversion wrote
// within its grace, and deletes an entry left by a failed request only as
// it read it.
func (s *Service) outboxEntry(c tally.Conversion) store.Item {
	return store.Item{
		Key:       keys.ConversionOutbox(c.ID),
		Attrs:     map[string]string{"at": strconv.FormatInt(time.Now().UnixNano(), 10)},
		Data:      records.MustJSON(c),
		ExpiresAt: c.CreatedAt.Add(outbox.Keep(s.deliveryRetention)).Unix(),
	}
}

// putConversion writes a conversion without caps or click apart
// (WithStreamConversions): the marker first, which makes this request the
// conversion's creator; false when another request's marker is there.
func (s *Service) putConversion(ctx context.Context, c tally.Conversion) (bool, error) {
	if c.ExternalTxnID != "" {
		err := s.events.Transact(ctx, store.Put(store.Item{Key: keys.Txn(c.BrandID, c.OfferID, c.ExternalTxnID), Data: records.MustJSON(c)}, store.NotExists()))
		if _, exists := store.FailedOp(err); exists {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return true, s.completeConversion(ctx, c)
}

// completeConversion writes the outbox entry, then the conversion unless a
// request completing the same one got there first. The entry comes first:
// once the conversion is there, its event can always be made again.
func (s *Service) completeConversion(ctx context.Context, c tally.Conversion) error {
	if err := s.events.Transact(ctx, store.Put(s.outboxEntry(c))); err != nil {
		return err
	}
	err := s.events.Transact(ctx, store.Put(s.newConversionItem(c), store.NotExists()))
	if _, exists := store.FailedOp(err); exists {
		return nil
	}
	return err
}

// replay returns the conversion first recorded for c's (offer,
// externalTxnId). A marker that holds the conversion (putConversion) may
// have lost its request before the conversion was written: it is
// completed now, as first recorded.
func (s *Service) replay(ctx context.Context, c tally.Conversion) (tally.Conversion, bool, error) {
	marker, err := s.store.Get(ctx, keys.Txn(c.BrandID, c.OfferID, c.ExternalTxnID))
	if err != nil {
		return tally.Conversion{}, false, err
	}
	var first tally.Conversion
	var firstID string
	if json.Unmarshal(marker.Data, &firstID) == nil { // written with its conversion, in one transaction
		first, err = records.Get[tally.Conversion](ctx, s.store, keys.Conversion(c.BrandID, firstID))
		return first, false, err
	}
	if err := records.Decode(marker, &first); err != nil {
		return first, false, err
	}
	stored, err := records.Get[tally.Conversion](ctx, s.store, keys.Conversion(first.BrandID, first.ID))
	if errors.Is(err, store.ErrNotFound) {
		return first, false, s.completeConversion(ctx, first)
	}
	return stored, false, err
}

// createdEvent is a conversion's conversion.created event as the fan-out
// makes it from the stream: the same for the same conversion (its id is
// derived from the conversion's), so a repeated or re-driven fan-out
// writes the same item. It is in no index (the events list, read by tests
// and inspection, does not show it).
func (s *Service) createdEvent(c tally.Conversion) store.Item {
	evt := tally.Event{
		ID:    ids.Derived("evt_", c.CreatedAt.Time, tally.EventConversionCreated+"/"+c.ID),
		Event: tally.EventConversionCreated, CreatedAt: c.CreatedAt, BrandID: c.BrandID,
		Data: records.MustJSON(conversionEventData(c, "")),
	}
	return store.Item{
		Key:       keys.Event(evt.ID),
		Attrs:     map[string]string{"type": evt.Event, "brandId": c.BrandID, outboxAttr: c.ID},
		Data:      records.MustJSON(evt),
		ExpiresAt: c.CreatedAt.Add(outbox.Keep(s.deliveryRetention)).Unix(), // deliveries read their envelope from it
	}
}

// writeCreatedEvent writes c's conversion.created event (createdEvent).
func (s *Service) writeCreatedEvent(ctx context.Context, c tally.Conversion) (store.Item, error) {
	evt := s.createdEvent(c)
	return evt, s.events.Transact(ctx, store.Put(evt))
}

// DispatchConversion is Dispatch for a conversion the stream shows
// inserted (a new image marked by WithStreamConversions): it writes the
// conversion's conversion.created event and dispatches it.
func (s *Service) DispatchConversion(ctx context.Context, conversion store.Item) ([]DeliveryMessage, error) {
	var c tally.Conversion
	if err := records.Decode(conversion, &c); err != nil {
		return nil, err
	}
	evt, err := s.writeCreatedEvent(ctx, c)
	if err != nil {
		return nil, err
	}
	return s.dispatch(ctx, evt)
}

// inOutbox says whether an event's deliveries may not all be written yet:
// it has its outbox key (gsi3), or it was made from the stream and names
// its conversion's outbox entry (which may be gone already: leaving it
// again costs a delete).
func inOutbox(event store.Item) bool {
	return event.GSI3 != (store.IndexKey{}) || event.Attrs[outboxAttr] != ""
}

// outboxedConversions makes the events of the conversions in the outbox
// since before cutoff (the stream's record of them was lost, or their
// deliveries' messages), at most limit, oldest first, and returns their
// ids to be fanned out again. An entry whose conversion is not there was
// left by a request that failed before writing it (and so was not
// accepted): it is deleted. An entry written after cutoff is left to the
// next run whatever its conversion's age: a retry completing a conversion
// first recorded earlier writes it again, then the conversion, and may be
// between the two.
func (s *Service) outboxedConversions(ctx context.Context, cutoff time.Time, limit int) ([]string, error) {
	entries, err := oldestFirst(ctx, s.store, store.Table, keys.ConversionOutboxPK, ids.Ceil("cnv_", cutoff), limit, func(it store.Item) (store.Item, error) {
		return it, nil
	})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, it := range entries {
		if at, err := strconv.ParseInt(it.Attrs["at"], 10, 64); err == nil && at > cutoff.UnixNano() {
			continue
		}
		var c tally.Conversion
		if err := records.Decode(it, &c); err != nil {
			return out, err
		}
		_, err := s.store.Get(ctx, keys.Conversion(c.BrandID, c.ID))
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = s.events.Transact(ctx, store.Delete(it.Key, store.AttrEquals("at", it.Attrs["at"])))
			if _, rewritten := store.FailedOp(err); rewritten {
				err = nil // a retry of the request is completing it
			}
			if err != nil {
				return out, err
			}
		case err != nil:
			return out, err
		default:
			evt, err := s.writeCreatedEvent(ctx, c)
			if err != nil {
				return out, err
			}
			out = append(out, strings.TrimPrefix(evt.PK, "EVT#"))
		}
	}
	return out, nil
}
