package conversions

import (
	"context"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ledger"
	"github.com/tally-hq/tally/internal/money"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// ReversalInput is the body of POST /conversions/{id}/reverse.
type ReversalInput struct {
	Reason *string `json:"reason"`
	Note   *string `json:"note"`
}

func (in ReversalInput) validate() error {
	return validate.First(
		validate.Required("reason", in.Reason != nil),
		validate.OneOf("reason", in.Reason, tally.ReversalRefund, tally.ReversalChargeback, tally.ReversalFraud, tally.ReversalOther),
		validate.Paragraph("note", in.Note, false, 1000),
	)
}

// ReverseConversion moves an approved conversion to reversed (a refund,
// a chargeback) and emits conversion.reversed. Its payout leaves the
// partner's owed balance, and a negative owed entry makes the next payout
// subtract it (a clawback, when a payout had the conversion already). The
// write holds only while the conversion is approved, so of two racing
// reversals one takes effect.
func (s *Service) ReverseConversion(ctx context.Context, brandID, conversionID string, in ReversalInput) (tally.Conversion, error) {
	if err := in.validate(); err != nil {
		return tally.Conversion{}, err
	}
	for {
		c, read, err := s.stored(ctx, brandID, conversionID)
		if err != nil {
			return c, err
		}
		if c.Status != tally.ConversionApproved {
			return c, notReversible(c.Status)
		}
		now := s.db.Now()
		at := tally.NewTime(now)
		c.Status, c.UpdatedAt, c.ReversedAt = tally.ConversionReversed, at, &at
		c.ReversalReason, c.ReversalNote = *in.Reason, validate.Deref(in.Note, "")
		data := EventData(c, "")
		data.ReversalReason, data.ReversalNote = c.ReversalReason, c.ReversalNote
		evt, err := s.events.Event(brandID, tally.EventConversionReversed, data, now)
		if err != nil {
			return c, err
		}
		ops := append([]store.Op{store.Put(rewrite(c, read), store.AttrEquals("status", tally.ConversionApproved))},
			reports.ConversionIncrements(c, reports.Decided(c, tally.ConversionReversed))...)
		ops = append(ops, ledger.Reversed(c)...)
		ops = append(ops, audit.Record(ctx, brandID, tally.EventConversionReversed, c.ID,
			auditSummary(c, tally.ConversionApproved)+" ("+c.ReversalReason+")", now)...)
		err = s.events.Transact(ctx, append(ops, evt)...)
		if _, failed := store.FailedOp(err); failed {
			continue // reversed meanwhile: read it again
		}
		if err == nil {
			s.entered(tally.ConversionReversed)
		}
		return c, err
	}
}

func notReversible(status string) error {
	return tally.Errorf(tally.ECodeInvalidTransition, "Cannot reverse a conversion whose status is %q; only approved conversions can be.", status)
}

// auditSummary describes a conversion's change of status from previous,
// for the audit log.
func auditSummary(c tally.Conversion, previous string) string {
	return previous + " → " + c.Status + ", offer " + c.OfferID + ", partner " + c.PartnerID +
		", payout " + money.Major(c.PayoutCents, c.Currency) + " " + c.Currency
}
