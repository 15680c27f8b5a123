package conversions

import (
	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/records"
)

// AsCreated is c as it was recorded, whatever happened to it since: a
// decision (manual, or the hold's automatic approval) and a reversal are
// undone. A conversion recorded approved is the one whose approvedAt is its
// createdAt; a later approval is never at its createdAt (decideConversion).
// approveAt, which a decision clears, stays cleared: nothing made from the
// conversion as created (CreatedEvent) holds it.
func AsCreated(c tally.Conversion) tally.Conversion {
	if c.ApprovedAt != nil && c.ApprovedAt.Equal(c.CreatedAt.Time) {
		c.Status, c.ApprovedAt = tally.ConversionApproved, &c.CreatedAt
	} else {
		c.Status, c.ApprovedAt = tally.ConversionPending, nil
	}
	c.ReversalReason, c.ReversalNote, c.ReversedAt = "", "", nil
	c.UpdatedAt = c.CreatedAt
	return c
}

// CreatedEvent is c's conversion.created as made from the conversion
// itself, not stored (ForStream; webhooks.Engine.DispatchConversion): the
// same event, byte for byte, whenever it is made, however c changed since
// (AsCreated). Its id and time are derived from the conversion's.
func CreatedEvent(c tally.Conversion) tally.Event {
	c = AsCreated(c)
	return tally.Event{
		ID:    ids.Derived("evt_", c.CreatedAt.Time, tally.EventConversionCreated+"/"+c.ID),
		Event: tally.EventConversionCreated, CreatedAt: c.CreatedAt, BrandID: c.BrandID,
		Data: records.MustJSON(EventData(c, "")),
	}
}
