// Package offers keeps the brands' offers: what a conversion of each pays,
// its caps, and the destination a tracking link redirects to.
package offers

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service keeps the offers.
type Service struct {
	db      *records.DB
	entries *records.Cache[Entry]  // by brand and offer id
	brands  *records.Cache[string] // offer id → brand id; never changes
	// partners finds the partners that terms name (WithPartners).
	partners partnerReader
}

// New returns the Service over db. An instance trusts the offers it read
// for cacheTTL: a change reaches the others within it.
func New(db *records.DB, cacheTTL time.Duration) *Service {
	return &Service{
		db:      db,
		entries: records.NewCache[Entry](cacheTTL, db.Clock),
		brands:  records.NewCache[string](time.Hour, db.Clock),
	}
}

// OfferInput is the body of POST /offers. Pointers tell absent from zero.
// Amounts are at most 10^12 minor units, which keeps sums of many far from
// int64 overflow; a hold is at most a year (24 × 366 hours): longer holds
// are surely mistakes.
type OfferInput struct {
	Name           *string `json:"name"`
	DestinationURL *string `json:"destinationUrl"`
	RevenueCents   *int64  `json:"revenueCents" range:"0,1000000000000"`
	PayoutCents    *int64  `json:"payoutCents" range:"0,1000000000000"`
	// PayoutPercent pays a share of each conversion's revenue instead of
	// PayoutCents; read as text, so that 12.555 is refused, not rounded.
	PayoutPercent *json.Number `json:"payoutPercent"`
	Currency      *string      `json:"currency"`
	Status        *string      `json:"status"`
	Approval      *string      `json:"approval"`
	HoldHours     *int         `json:"holdHours" range:"0,8784"`
	Caps          *tally.Caps  `json:"caps"`
	// AttributionWindowDays defaults to tally.DefaultAttributionWindowDays.
	AttributionWindowDays *int `json:"attributionWindowDays" range:"1,365"`
	// FallbackURL is optional; "" means none.
	FallbackURL *string `json:"fallbackUrl"`
}

func (in OfferInput) checks() []error {
	errs := []error{
		validate.Text("name", in.Name, true, 200),
		validate.HTTPURL("destinationUrl", in.DestinationURL, true),
		checkDestinationMacros("destinationUrl", in.DestinationURL),
		checkFallback(in.FallbackURL),
		validate.Required("revenueCents", in.RevenueCents != nil),
		payoutChoice(in.PayoutCents, in.PayoutPercent),
		validate.Currency("currency", in.Currency, true),
		validate.OneOf("status", in.Status, tally.OfferActive, tally.OfferPaused),
		validate.OneOf("approval", in.Approval, tally.ApprovalAuto, tally.ApprovalManual),
	}
	errs = append(errs, validate.Ranges(in)...)
	if validate.Deref(in.HoldHours, 0) > 0 && validate.Deref(in.Approval, tally.ApprovalAuto) != tally.ApprovalManual {
		errs = append(errs, validate.InvalidField("holdHours", "holdHours applies only to offers with approval \"manual\"."))
	}
	return errs
}

func (in OfferInput) validate() error { return validate.First(in.checks()...) }

// payoutChoice checks that exactly one of a fixed payout and a percentage
// is given, and the percentage's form.
func payoutChoice(cents *int64, percent *json.Number) error {
	switch {
	case cents != nil && percent != nil:
		return validate.InvalidField("payoutPercent", "Give either payoutCents or payoutPercent, not both.")
	case percent != nil:
		_, err := ParsePercent(*percent)
		return err
	}
	return validate.Required("payoutCents", cents != nil)
}

// ParsePercent reads payoutPercent: more than 0, at most 100, with at
// most two decimals.
func ParsePercent(n json.Number) (tally.Percent, error) {
	p, err := tally.ParsePercent(n.String())
	if err != nil || p <= 0 || p > 10000 {
		return 0, validate.InvalidField("payoutPercent", "payoutPercent must be a number more than 0 and at most 100, with at most two decimals (e.g. 12.5); got %s.", n)
	}
	return p, nil
}

// percentOf is the offer's percentage as given, validated before.
func percentOf(n *json.Number) *tally.Percent {
	if n == nil {
		return nil
	}
	p, _ := ParsePercent(*n)
	return &p
}

// FieldErrors checks every field of an offer and maps each field with a
// problem to its message (the dashboard's offer form shows them all).
func (in OfferInput) FieldErrors() map[string]string { return validate.FieldErrors(in.checks()...) }

// CreateOffer creates an offer for the brand.
func (s *Service) CreateOffer(ctx context.Context, brandID string, in OfferInput) (tally.Offer, error) {
	if err := in.validate(); err != nil {
		return tally.Offer{}, err
	}
	now := s.db.Now()
	o := tally.Offer{
		ID:                    ids.New("off_", now),
		BrandID:               brandID,
		Name:                  strings.TrimSpace(*in.Name),
		DestinationURL:        *in.DestinationURL,
		RevenueCents:          *in.RevenueCents,
		PayoutCents:           validate.Deref(in.PayoutCents, 0),
		PayoutPercent:         percentOf(in.PayoutPercent),
		Currency:              *in.Currency,
		Status:                validate.Deref(in.Status, tally.OfferActive),
		Approval:              validate.Deref(in.Approval, tally.ApprovalAuto),
		HoldHours:             validate.Deref(in.HoldHours, 0),
		Caps:                  validate.Deref(in.Caps, tally.Caps{}),
		AttributionWindowDays: validate.Deref(in.AttributionWindowDays, tally.DefaultAttributionWindowDays),
		FallbackURL:           validate.Deref(in.FallbackURL, ""),
		CreatedAt:             tally.NewTime(now),
		UpdatedAt:             tally.NewTime(now),
	}
	e := Entry{Offer: o, Rev: 1}
	err := s.db.Transact(ctx, append([]store.Op{
		store.Put(item(e), store.NotExists()),
		store.Put(store.Item{Key: keys.OfferRef(o.ID), Data: records.MustJSON(brandID)}, store.NotExists())},
		audit.Record(ctx, brandID, audit.OfferCreated, o.ID, o.Name, now)...)...)
	if err != nil {
		return tally.Offer{}, err
	}
	s.entries.Put(brandID+"/"+o.ID, e)
	return o, nil
}

// Entry is an offer with its revision, which grows with every change,
// and its per-partner payout terms. Writes that rely on a cached offer
// check the revision in their transaction (Check), so a change (of terms
// too) is in force at once everywhere.
type Entry struct {
	Offer tally.Offer
	Rev   int64
	// Terms are by partner id. They live in the offer's item, so that a
	// conversion reads them with the offer, at no extra cost.
	Terms map[string]tally.PayoutTerms
}

// stored is an offer's item body: the offer and its terms.
type stored struct {
	tally.Offer
	PartnerTerms map[string]tally.PayoutTerms `json:"partnerTerms,omitempty"`
}

func item(e Entry) store.Item {
	return store.Item{Key: keys.Offer(e.Offer.BrandID, e.Offer.ID), Attrs: map[string]string{"status": e.Offer.Status},
		Nums: map[string]int64{"rev": e.Rev}, Data: records.MustJSON(stored{e.Offer, e.Terms})}
}

// Payout is what a conversion of e by partnerID with revenueCents pays:
// the partner's terms, else the offer's, a percentage rounded half up.
func (e Entry) Payout(partnerID string, revenueCents int64) int64 {
	cents, percent := e.Offer.PayoutCents, e.Offer.PayoutPercent
	if t, ok := e.Terms[partnerID]; ok {
		cents, percent = validate.Deref(t.PayoutCents, 0), t.PayoutPercent
	}
	if percent != nil {
		return percent.Of(revenueCents)
	}
	return cents
}

// Check holds while the offer is active and still at the revision e
// was read at.
func Check(e Entry) store.Op {
	return store.Check(keys.Offer(e.Offer.BrandID, e.Offer.ID), store.AttrEquals("status", tally.OfferActive), store.NumEquals("rev", e.Rev))
}

// Offer returns one of the brand's offers.
func (s *Service) Offer(ctx context.Context, brandID, offerID string) (tally.Offer, error) {
	if !ids.Valid("off_", offerID) {
		return tally.Offer{}, records.NotFound(store.ErrNotFound, "offer", offerID)
	}
	o, err := records.Get[tally.Offer](ctx, s.db, keys.Offer(brandID, offerID))
	return o, records.NotFound(err, "offer", offerID)
}

// Cached reads an offer through the per-instance cache. A write that
// relies on it includes Check, and reloads the offer (Load) when
// that fails.
func (s *Service) Cached(ctx context.Context, brandID, offerID string) (Entry, error) {
	if e, ok := s.entries.Get(brandID + "/" + offerID); ok {
		return e, nil
	}
	return s.Load(ctx, brandID, offerID)
}

// Load reads an offer and its revision from the store into the cache.
func (s *Service) Load(ctx context.Context, brandID, offerID string) (Entry, error) {
	if !ids.Valid("off_", offerID) {
		return Entry{}, records.NotFound(store.ErrNotFound, "offer", offerID)
	}
	it, err := s.db.Get(ctx, keys.Offer(brandID, offerID))
	if err != nil {
		return Entry{}, records.NotFound(err, "offer", offerID)
	}
	var body stored
	if err := records.Decode(it, &body); err != nil {
		return Entry{}, err
	}
	e := Entry{Offer: body.Offer, Rev: it.Nums["rev"], Terms: body.PartnerTerms}
	s.entries.Put(brandID+"/"+offerID, e)
	return e, nil
}

// ByID finds an offer from its id alone (the tracking link).
func (s *Service) ByID(ctx context.Context, offerID string) (Entry, error) {
	if !ids.Valid("off_", offerID) {
		return Entry{}, records.NotFound(store.ErrNotFound, "offer", offerID)
	}
	brandID, ok := s.brands.Get(offerID)
	if !ok {
		var err error
		if brandID, err = records.Get[string](ctx, s.db, keys.OfferRef(offerID)); err != nil {
			return Entry{}, records.NotFound(err, "offer", offerID)
		}
		s.brands.Put(offerID, brandID)
	}
	return s.Cached(ctx, brandID, offerID)
}

// Offers lists the brand's offers, newest first.
func (s *Service) Offers(ctx context.Context, brandID string, p records.ListParams) ([]tally.Offer, string, error) {
	sp := records.Span{Parts: []records.Partition{{PK: keys.BrandPK(brandID)}}, Prefix: keys.OfferSKPrefix}
	return records.ListSpan[tally.Offer](ctx, s.db, sp, p, nil)
}

type Cap struct {
	Name  string
	Limit int64
}

// CapsOf lists the caps that are set.
func CapsOf(c tally.Caps) []Cap {
	var out []Cap
	for _, c := range []struct {
		name  string
		limit *int64
	}{{"daily", c.Daily}, {"weekly", c.Weekly}, {"monthly", c.Monthly}, {"global", c.Global}} {
		if c.limit != nil {
			out = append(out, Cap{c.name, *c.limit})
		}
	}
	return out
}

// checkFallback checks a fallback URL as a destination is checked; ""
// (none, or removing it in a patch) is accepted.
func checkFallback(v *string) error {
	if v == nil || *v == "" {
		return nil
	}
	return cmp.Or(validate.HTTPURL("fallbackUrl", v, false), checkDestinationMacros("fallbackUrl", v))
}

// CapPeriod names the cap period containing t: its counter's sort key and
// the period in cap.reached.
func CapPeriod(cap string, t time.Time) string {
	t = t.UTC()
	switch cap {
	case "daily":
		return "daily#" + t.Format(time.DateOnly)
	case "weekly":
		y, w := t.ISOWeek()
		return fmt.Sprintf("weekly#%04d-W%02d", y, w)
	case "monthly":
		return "monthly#" + t.Format("2006-01")
	}
	return "global"
}

// CapReached tells whether one of the offer's caps is full for the period
// containing now: its counter (kept by the conversions) is at its limit.
// It costs a read per cap set, so the tracking link asks only for offers
// with a fallback URL to send visitors to.
func (s *Service) CapReached(ctx context.Context, o tally.Offer, now time.Time) (bool, error) {
	for _, c := range CapsOf(o.Caps) {
		it, err := s.db.Get(ctx, keys.Cap(o.ID, CapPeriod(c.Name, now)))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return false, err
		}
		if it.Nums["n"] >= c.Limit {
			return true, nil
		}
	}
	return false, nil
}

// OfferPatch is the body of PATCH /offers/{id}: the fields to change.
// Caps are merged by name: a cap given as null is removed, a cap left out
// is kept. The currency cannot change.
type OfferPatch struct {
	Name                  *string           `json:"name"`
	DestinationURL        *string           `json:"destinationUrl"`
	RevenueCents          *int64            `json:"revenueCents"`
	PayoutCents           *int64            `json:"payoutCents"`
	PayoutPercent         *json.Number      `json:"payoutPercent"`
	Currency              *string           `json:"currency"`
	Status                *string           `json:"status"`
	Approval              *string           `json:"approval"`
	HoldHours             *int              `json:"holdHours"`
	Caps                  map[string]*int64 `json:"caps"`
	AttributionWindowDays *int              `json:"attributionWindowDays"`
	FallbackURL           *string           `json:"fallbackUrl"`
}

// apply returns o with the patch's changes, as the input that creating such
// an offer would take, so that both are validated alike.
func (in OfferPatch) apply(o tally.Offer) (OfferInput, error) {
	if in.Currency != nil && *in.Currency != o.Currency {
		return OfferInput{}, validate.InvalidField("currency", "currency cannot change: reports and payouts are kept in it. Create another offer.")
	}
	caps := o.Caps
	for name, limit := range in.Caps {
		switch name {
		case "daily":
			caps.Daily = limit
		case "weekly":
			caps.Weekly = limit
		case "monthly":
			caps.Monthly = limit
		case "global":
			caps.Global = limit
		default:
			return OfferInput{}, validate.InvalidField("caps."+name, "caps.%s is not a cap; caps are daily, weekly, monthly and global.", name)
		}
	}
	// Giving one of payoutCents and payoutPercent replaces the other.
	cents, percent := in.PayoutCents, in.PayoutPercent
	if cents == nil && percent == nil {
		if o.PayoutPercent != nil {
			n := json.Number(o.PayoutPercent.String())
			percent = &n
		} else {
			cents = &o.PayoutCents
		}
	}
	return OfferInput{
		Name:                  cmp.Or(in.Name, &o.Name),
		DestinationURL:        cmp.Or(in.DestinationURL, &o.DestinationURL),
		RevenueCents:          cmp.Or(in.RevenueCents, &o.RevenueCents),
		PayoutCents:           cents,
		PayoutPercent:         percent,
		Currency:              &o.Currency,
		Status:                cmp.Or(in.Status, &o.Status),
		Approval:              cmp.Or(in.Approval, &o.Approval),
		HoldHours:             cmp.Or(in.HoldHours, &o.HoldHours),
		Caps:                  &caps,
		AttributionWindowDays: cmp.Or(in.AttributionWindowDays, &o.AttributionWindowDays),
		FallbackURL:           cmp.Or(in.FallbackURL, &o.FallbackURL),
	}, nil
}

// UpdateOffer changes an offer. The change is in force at once for clicks
// and conversions on every instance (they check the offer's revision). A
// cap changed mid-period applies to the period's count so far: lowering it
// below the count refuses further conversions, raising it admits more, and
// the conversion that reaches the new cap emits cap.reached.
func (s *Service) UpdateOffer(ctx context.Context, brandID, offerID string, in OfferPatch) (tally.Offer, error) {
	for {
		cur, err := s.Load(ctx, brandID, offerID)
		if err != nil {
			return tally.Offer{}, err
		}
		merged, err := in.apply(cur.Offer)
		if err != nil {
			return tally.Offer{}, err
		}
		if err := merged.validate(); err != nil {
			return tally.Offer{}, err
		}
		o := cur.Offer
		o.Name, o.DestinationURL = strings.TrimSpace(*merged.Name), *merged.DestinationURL
		o.RevenueCents, o.PayoutCents, o.PayoutPercent = *merged.RevenueCents, validate.Deref(merged.PayoutCents, 0), percentOf(merged.PayoutPercent)
		if o.PayoutPercent != nil && cur.Offer.PayoutPercent != nil && *o.PayoutPercent == *cur.Offer.PayoutPercent {
			o.PayoutPercent = cur.Offer.PayoutPercent // the same percentage, given anew: compare it by value
		}
		o.Status, o.Approval, o.HoldHours = *merged.Status, *merged.Approval, *merged.HoldHours
		o.Caps, o.AttributionWindowDays = *merged.Caps, *merged.AttributionWindowDays
		o.FallbackURL = *merged.FallbackURL
		if slices.Equal(CapsOf(o.Caps), CapsOf(cur.Offer.Caps)) {
			o.Caps = cur.Offer.Caps // the same limits, given anew: compare them by value
		}
		if o == cur.Offer {
			return o, nil // nothing changes
		}
		o.UpdatedAt = tally.NewTime(s.db.Now())
		next := Entry{Offer: o, Rev: cur.Rev + 1, Terms: cur.Terms}
		err = s.db.Transact(ctx, append([]store.Op{store.Put(item(next), store.Exists(), store.NumEquals("rev", cur.Rev))},
			audit.Record(ctx, brandID, audit.OfferUpdated, o.ID, o.Name+": "+audit.Changes(cur.Offer, o, "updatedAt"), o.UpdatedAt.Time)...)...)
		if _, failed := store.FailedOp(err); failed {
			continue // changed (or deleted) meanwhile: apply the patch to what is there now
		}
		if err != nil {
			return tally.Offer{}, err
		}
		s.entries.Put(brandID+"/"+offerID, next)
		return o, nil
	}
}

// MaxReloads bounds how often one write follows an offer that keeps
// changing under it.
const MaxReloads = 5

// ErrChanged means a write was built from an older revision of an
// offer than the store holds; the cache has the new one now.
var ErrChanged = errors.New("the offer changed meanwhile")

// NotActive explains why Check failed: the offer is not active
// (a user error), or it changed since it was cached (ErrChanged, after
// the cache was refreshed).
func (s *Service) NotActive(ctx context.Context, e Entry, what string) error {
	fresh, err := s.Load(ctx, e.Offer.BrandID, e.Offer.ID)
	if err != nil {
		return err
	}
	if fresh.Offer.Status != tally.OfferActive {
		return validate.Invalid("offerId %q: the offer is %s; %s are accepted only for active offers.", e.Offer.ID, fresh.Offer.Status, what)
	}
	return ErrChanged
}
