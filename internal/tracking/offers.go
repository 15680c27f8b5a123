package tracking

import (
	"context"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/store"
)

// OfferInput is the body of POST /offers. Pointers tell absent from zero.
type OfferInput struct {
	Name           *string     `json:"name"`
	DestinationURL *string     `json:"destinationUrl"`
	RevenueCents   *int64      `json:"revenueCents"`
	PayoutCents    *int64      `json:"payoutCents"`
	Currency       *string     `json:"currency"`
	Status         *string     `json:"status"`
	Approval       *string     `json:"approval"`
	HoldHours      *int        `json:"holdHours"`
	Caps           *tally.Caps `json:"caps"`
}

// maxHoldHours is a year: longer holds are surely mistakes.
const maxHoldHours = 24 * 366

func (in OfferInput) validate() error {
	err := firstError(
		text("name", in.Name, true, 200),
		httpURL("destinationUrl", in.DestinationURL, true),
		cents("revenueCents", in.RevenueCents, true),
		cents("payoutCents", in.PayoutCents, true),
		currency("currency", in.Currency, true),
		oneOf("status", in.Status, tally.OfferActive, tally.OfferPaused),
		oneOf("approval", in.Approval, tally.ApprovalAuto, tally.ApprovalManual),
	)
	if err != nil {
		return err
	}
	if h := deref(in.HoldHours, 0); h < 0 || h > maxHoldHours {
		return invalid("holdHours must be from 0 to %d.", maxHoldHours)
	} else if h > 0 && deref(in.Approval, tally.ApprovalAuto) != tally.ApprovalManual {
		return invalid("holdHours applies only to offers with approval \"manual\".")
	}
	if in.Caps != nil {
		for _, c := range capsOf(*in.Caps) {
			if c.limit < 1 || c.limit > 1e9 {
				return invalid("caps.%s must be a whole number from 1 to 1000000000, or null for no cap.", c.name)
			}
		}
	}
	return nil
}

// CreateOffer creates an offer for the brand.
func (s *Service) CreateOffer(ctx context.Context, brandID string, in OfferInput) (tally.Offer, error) {
	if err := in.validate(); err != nil {
		return tally.Offer{}, err
	}
	now := s.Now()
	o := tally.Offer{
		ID:             ids.New("off_", now),
		BrandID:        brandID,
		Name:           strings.TrimSpace(*in.Name),
		DestinationURL: *in.DestinationURL,
		RevenueCents:   *in.RevenueCents,
		PayoutCents:    *in.PayoutCents,
		Currency:       *in.Currency,
		Status:         deref(in.Status, tally.OfferActive),
		Approval:       deref(in.Approval, tally.ApprovalAuto),
		HoldHours:      deref(in.HoldHours, 0),
		Caps:           deref(in.Caps, tally.Caps{}),
		CreatedAt:      tally.NewTime(now),
	}
	item := store.Item{Key: offerKey(brandID, o.ID), Attrs: map[string]string{"status": o.Status}, Data: mustJSON(o)}
	if err := s.transact(ctx, store.Put(item, store.NotExists())); err != nil {
		return tally.Offer{}, err
	}
	return o, nil
}

// Offer returns one of the brand's offers.
func (s *Service) Offer(ctx context.Context, brandID, offerID string) (tally.Offer, error) {
	if !ids.Valid("off_", offerID) {
		return tally.Offer{}, notFound(store.ErrNotFound, "offer", offerID)
	}
	o, err := getRecord[tally.Offer](ctx, s.store, offerKey(brandID, offerID))
	return o, notFound(err, "offer", offerID)
}

// cachedOffer reads an offer through the per-instance cache. Only fields that
// never change (amounts, currency, approval, hold, caps) may be taken from
// it; the offer's status is checked inside the write transaction.
func (s *Service) cachedOffer(ctx context.Context, brandID, offerID string) (tally.Offer, error) {
	k := brandID + "/" + offerID
	if o, ok := s.offers.get(k); ok {
		return o, nil
	}
	o, err := s.Offer(ctx, brandID, offerID)
	if err == nil {
		s.offers.put(k, o)
	}
	return o, err
}

// Offers lists the brand's offers, newest first.
func (s *Service) Offers(ctx context.Context, brandID string, p ListParams) ([]tally.Offer, string, error) {
	sp := span{parts: []partition{{pk: brandPK(brandID)}}, prefix: offerSKPrefix}
	return listSpan[tally.Offer](ctx, s.store, sp, p, nil)
}

type capLimit struct {
	name  string
	limit int64
}

// capsOf lists the caps that are set.
func capsOf(c tally.Caps) []capLimit {
	var out []capLimit
	for _, c := range []struct {
		name  string
		limit *int64
	}{{"daily", c.Daily}, {"weekly", c.Weekly}, {"monthly", c.Monthly}, {"global", c.Global}} {
		if c.limit != nil {
			out = append(out, capLimit{c.name, *c.limit})
		}
	}
	return out
}
