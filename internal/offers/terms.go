package offers

import (
	"context"
	"encoding/json"
	"maps"
	"slices"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/money"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// maxTerms bounds the partners with terms of their own on one offer: the
// terms live in the offer's item, which DynamoDB caps at 400 KB.
const maxTerms = 1000

// partnerReader finds the partner that terms name, in the brand.
type partnerReader interface {
	Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error)
}

// WithPartners lets the Service check the partners that terms name.
func (s *Service) WithPartners(p partnerReader) *Service {
	s.partners = p
	return s
}

// TermsInput is the body of PUT /offers/{id}/partners/{partnerId}/terms:
// exactly one of the two.
type TermsInput struct {
	PayoutCents   *int64       `json:"payoutCents" range:"0,1000000000000"`
	PayoutPercent *json.Number `json:"payoutPercent"`
}

// Terms returns a partner's payout terms on an offer; not found when the
// partner has none (it earns the offer's payout).
func (s *Service) Terms(ctx context.Context, brandID, offerID, partnerID string) (tally.PayoutTerms, error) {
	e, err := s.Load(ctx, brandID, offerID)
	if err != nil {
		return tally.PayoutTerms{}, err
	}
	t, ok := e.Terms[partnerID]
	if !ok {
		return t, tally.Errorf(tally.ECodeNotFound, "Partner %q has no terms of its own on offer %q; it earns the offer's payout.", partnerID, offerID)
	}
	return t, nil
}

// AllTerms lists the partners' own terms on an offer, by partner id.
func (s *Service) AllTerms(ctx context.Context, brandID, offerID string) ([]tally.PayoutTerms, error) {
	e, err := s.Load(ctx, brandID, offerID)
	if err != nil {
		return nil, err
	}
	out := make([]tally.PayoutTerms, 0, len(e.Terms))
	for _, id := range slices.Sorted(maps.Keys(e.Terms)) {
		out = append(out, e.Terms[id])
	}
	return out, nil
}

// Listed is an offer of a list, with its partners' own terms.
type Listed struct {
	tally.Offer
	Terms map[string]tally.PayoutTerms
}

// OffersWithTerms lists the brand's offers, newest first, each with its
// partners' terms (read with it: they live in its item).
func (s *Service) OffersWithTerms(ctx context.Context, brandID string, p records.ListParams) ([]Listed, string, error) {
	sp := records.Span{Parts: []records.Partition{{PK: keys.BrandPK(brandID)}}, Prefix: keys.OfferSKPrefix}
	list, next, err := records.ListSpan[stored](ctx, s.db, sp, p, nil)
	out := make([]Listed, len(list))
	for i, o := range list {
		out[i] = Listed{Offer: o.Offer, Terms: o.PartnerTerms}
	}
	return out, next, err
}

// PutTerms sets a partner's payout terms on an offer. Conversions
// recorded from then on pay them; recorded ones keep their payout.
func (s *Service) PutTerms(ctx context.Context, brandID, offerID, partnerID string, in TermsInput) (tally.PayoutTerms, error) {
	if err := validate.First(append(validate.Ranges(in), payoutChoice(in.PayoutCents, in.PayoutPercent))...); err != nil {
		return tally.PayoutTerms{}, err
	}
	if _, err := s.partners.Partner(ctx, brandID, partnerID); err != nil {
		return tally.PayoutTerms{}, err
	}
	t := tally.PayoutTerms{OfferID: offerID, PartnerID: partnerID, PayoutCents: in.PayoutCents, PayoutPercent: percentOf(in.PayoutPercent)}
	err := s.changeTerms(ctx, brandID, offerID, func(o tally.Offer) string {
		return "terms of partner " + partnerID + " set: " + termsText(t, o.Currency)
	}, func(terms map[string]tally.PayoutTerms) error {
		if _, ok := terms[partnerID]; !ok && len(terms) >= maxTerms {
			return tally.Errorf(tally.ECodeConflict, "Offer %q has terms for %d partners, the most it can; delete some first.", offerID, maxTerms)
		}
		t.UpdatedAt = tally.NewTime(s.db.Now())
		terms[partnerID] = t
		return nil
	})
	return t, err
}

// DeleteTerms removes a partner's terms on an offer: it earns the offer's
// payout again. It returns the terms deleted.
func (s *Service) DeleteTerms(ctx context.Context, brandID, offerID, partnerID string) (tally.PayoutTerms, error) {
	var gone tally.PayoutTerms
	err := s.changeTerms(ctx, brandID, offerID, func(tally.Offer) string { return "terms of partner " + partnerID + " deleted" }, func(terms map[string]tally.PayoutTerms) error {
		t, ok := terms[partnerID]
		if !ok {
			return tally.Errorf(tally.ECodeNotFound, "Partner %q has no terms of its own on offer %q.", partnerID, offerID)
		}
		gone = t
		delete(terms, partnerID)
		return nil
	})
	return gone, err
}

// changeTerms applies change to the offer's terms and writes them with
// the next revision, on the condition that the revision read is still
// the stored one, so that no concurrent change is lost; summary says what
// changed, for the audit log.
func (s *Service) changeTerms(ctx context.Context, brandID, offerID string, summary func(tally.Offer) string, change func(map[string]tally.PayoutTerms) error) error {
	for {
		cur, err := s.Load(ctx, brandID, offerID)
		if err != nil {
			return err
		}
		terms := maps.Clone(cur.Terms)
		if terms == nil {
			terms = map[string]tally.PayoutTerms{}
		}
		if err := change(terms); err != nil {
			return err
		}
		next := Entry{Offer: cur.Offer, Rev: cur.Rev + 1, Terms: terms}
		err = s.db.Transact(ctx, append([]store.Op{store.Put(item(next), store.Exists(), store.NumEquals("rev", cur.Rev))},
			audit.Record(ctx, brandID, audit.TermsChanged, offerID, cur.Offer.Name+": "+summary(cur.Offer), s.db.Now())...)...)
		if _, failed := store.FailedOp(err); failed {
			continue
		}
		if err != nil {
			return err
		}
		s.entries.Put(brandID+"/"+offerID, next)
		return nil
	}
}

// termsText is terms as a person reads them: "5.00 USD" or "12.5%".
func termsText(t tally.PayoutTerms, currency string) string {
	if t.PayoutPercent != nil {
		return string(records.MustJSON(t.PayoutPercent)) + "%"
	}
	return money.Major(validate.Deref(t.PayoutCents, 0), currency) + " " + currency
}
