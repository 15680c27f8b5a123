// Package conversions records the conversions advertisers post (by API or
// GET postback), with their idempotency, caps, attribution to a click and
// events, approves them by hand or when their hold time has passed, and
// lists them.
package conversions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/jsonenc"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/ledger"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/trace"
	"github.com/tally-hq/tally/internal/validate"
)

// Service records and decides conversions.
type Service struct {
	db       *records.DB
	events   *outbox.Writer
	offers   *offers.Service
	partners partnerReader
	rollups  reports.Rollups
	writing  Writing
	// observer is told of each status a conversion enters; nil: nobody is.
	observer Observer
}

// Observer is told, for metrics, of each status a conversion enters: the
// one it is recorded with (tally.ConversionPending or
// tally.ConversionApproved), and the one a decision moves it to.
type Observer interface {
	ConversionEntered(status string)
}

// partnerReader reads the partner a conversion names.
type partnerReader interface {
	Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error)
}

// New returns the Service over db, writing through events, with the
// offers and partners conversions name, keeping rollups as rollups says
// and writing new conversions as writing says, telling observer (nil:
// nobody) of each status a conversion enters.
func New(db *records.DB, events *outbox.Writer, o *offers.Service, p partnerReader, rollups reports.Rollups, writing Writing, observer Observer) *Service {
	return &Service{db: db, events: events, offers: o, partners: p, rollups: rollups, writing: writing, observer: observer}
}

// entered tells the observer that a conversion entered status.
func (s *Service) entered(status string) {
	if s.observer != nil {
		s.observer.ConversionEntered(status)
	}
}

// click reads the click a conversion names. The click's own fields are
// all a conversion needs, so it is read as a tally.Click.
func (s *Service) click(ctx context.Context, brandID, clickID string) (tally.Click, error) {
	return records.GetByID[tally.Click](ctx, s.db, "click", "clk_", clickID, func() store.Key { return keys.Click(brandID, clickID) })
}

// ConversionInput is the body of POST /conversions (a server-side postback).
type ConversionInput struct {
	OfferID       *string `json:"offerId"`
	PartnerID     *string `json:"partnerId"`
	ClickID       *string `json:"clickId"`
	RevenueCents  *int64  `json:"revenueCents" range:"0,1000000000000"`
	PayoutCents   *int64  `json:"payoutCents" range:"0,1000000000000"`
	Currency      *string `json:"currency"`
	Sub1          *string `json:"sub1"`
	Sub2          *string `json:"sub2"`
	Sub3          *string `json:"sub3"`
	Sub4          *string `json:"sub4"`
	Sub5          *string `json:"sub5"`
	ExternalTxnID *string `json:"externalTxnId"`
}

func (in ConversionInput) validate() error {
	if err := validate.First(
		validate.Text("offerId", in.OfferID, in.ClickID == nil, 64),
		validate.First(validate.Ranges(in)...),
		validate.Currency("currency", in.Currency, false),
		validate.Text("sub1", in.Sub1, false, 255), validate.Text("sub2", in.Sub2, false, 255), validate.Text("sub3", in.Sub3, false, 255),
		validate.Text("sub4", in.Sub4, false, 255), validate.Text("sub5", in.Sub5, false, 255),
		validate.Text("externalTxnId", in.ExternalTxnID, false, 255),
	); err != nil {
		return err
	}
	// A transaction id is matched exactly, so "order-1 " would be a second
	// conversion of order-1, paid twice: white space around it (or only
	// white space) is a mistake in the advertiser's system, refused rather
	// than trimmed, so that the id stored is the one it sent.
	if txn := validate.Deref(in.ExternalTxnID, ""); strings.TrimSpace(txn) != txn {
		if strings.TrimSpace(txn) == "" {
			return validate.InvalidField("externalTxnId", "externalTxnId is blank: give the advertiser's transaction id, or leave it out (no idempotency then).")
		}
		return validate.InvalidField("externalTxnId", "externalTxnId %q starts or ends with white space: send the transaction id without it (it is matched exactly, so it would count as another transaction).", txn)
	}
	switch {
	case in.PartnerID == nil && in.ClickID == nil:
		return validate.Invalid("partnerId is required (or clickId, for a tracked click).")
	case in.ClickID != nil && *in.ClickID == "":
		return validate.Invalid("clickId is empty: give the click's id, or leave clickId out and give partnerId.")
	case in.PartnerID != nil && in.ClickID != nil:
		return validate.Invalid("Give either partnerId or clickId, not both.")
	case in.ClickID != nil:
		for i, sub := range []*string{in.Sub1, in.Sub2, in.Sub3, in.Sub4, in.Sub5} {
			if sub != nil {
				return validate.Invalid("sub%d comes from the click; leave it out when you give clickId.", i+1)
			}
		}
		if !ids.Valid("clk_", *in.ClickID) {
			return validate.Invalid("clickId %q does not match a recorded click.", *in.ClickID)
		}
	case !ids.Valid("prt_", *in.PartnerID):
		return validate.Invalid("partnerId %q does not match a partner.", *in.PartnerID)
	}
	if in.OfferID != nil && !ids.Valid("off_", *in.OfferID) {
		return validate.Invalid("offerId %q does not match an offer.", *in.OfferID)
	}
	return nil
}

// RecordConversion stores a conversion for the brand. It returns created =
// false, and the first conversion, when the same (offer, externalTxnId) was
// recorded before, or true with the first conversion when this request
// completed it (replay). The conversion, its idempotency marker, cap
// counters, report rollup (unless reports.FromStream) and events are one
// transaction; with ForStream, without its event (the fan-out makes it from
// the stream), and without caps or click no transaction (putConversion).
//
// A conversion that names a click takes its offer, partner and subs from
// the click, which must be younger than the offer's attribution window.
func (s *Service) RecordConversion(ctx context.Context, brandID string, in ConversionInput) (c tally.Conversion, created bool, err error) {
	if err := in.validate(); err != nil {
		return c, false, err
	}
	var click tally.Click
	if in.ClickID != nil {
		if click, err = s.attribute(ctx, brandID, &in); err != nil {
			return c, false, err
		}
	}
	offerOf := s.writing.offer(s)
	for attempt := 0; ; attempt++ {
		offer, err := offerOf(ctx, brandID, *in.OfferID)
		if err != nil {
			if tally.ErrorCode(err) == tally.ECodeNotFound {
				return c, false, validate.Invalid("offerId %q does not match an offer.", *in.OfferID)
			}
			return c, false, err
		}
		now := s.db.Now()
		if in.ClickID != nil {
			days := offer.Offer.AttributionWindowDays
			if now.After(click.CreatedAt.AddDate(0, 0, days)) {
				return c, false, validate.Invalid("clickId %q: the click is older than the offer's attribution window of %d days.", click.ID, days)
			}
		}
		if err := amountsInCurrency(offer.Offer, in); err != nil {
			return c, false, err
		}
		c = newConversion(s.db.NewID("cnv_", now), brandID, offer, in, now)
		c.ClickID = click.ID
		if err := s.writing.admit(ctx, s, offer.Offer, c); err != nil {
			return s.refusedUnlessRecorded(ctx, c, err)
		}
		created, err = s.insertConversion(ctx, c, offer, now, false)
		if err == nil && !created {
			c, created, err = s.replay(ctx, c, offer, now)
		}
		if errors.Is(err, offers.ErrChanged) && attempt < offers.MaxReloads {
			continue // the cache had an older revision, now replaced: build c again
		}
		if err == nil && created {
			s.entered(c.Status)
		}
		return c, created, err
	}
}

// activeNow refuses a conversion for an offer or a partner that is not
// active, as read just now (ForStream: instead of checks in
// the write).
func (s *Service) activeNow(ctx context.Context, offer tally.Offer, partnerID string) error {
	if offer.Status != tally.OfferActive {
		return validate.Invalid("offerId %q: the offer is %s; conversions are accepted only for active offers.", offer.ID, offer.Status)
	}
	p, err := s.partners.Partner(ctx, offer.BrandID, partnerID)
	if err == nil && p.Status == tally.PartnerActive {
		return nil
	}
	if err != nil && tally.ErrorCode(err) != tally.ECodeNotFound {
		return err
	}
	return s.partnerNotActive(ctx, offer.BrandID, partnerID)
}

// refusedUnlessRecorded answers a conversion that activeNow refused: with
// the first conversion when its (offer, externalTxnId) was recorded before
// (a retry of an accepted conversion replays, as the marker's condition,
// first in the transaction, answers it there), else with the refusal.
func (s *Service) refusedUnlessRecorded(ctx context.Context, c tally.Conversion, refusal error) (tally.Conversion, bool, error) {
	if c.ExternalTxnID == "" {
		return c, false, refusal
	}
	first, written, err := s.firstRecorded(ctx, c)
	if errors.Is(err, store.ErrNotFound) || err == nil && !written {
		return c, false, refusal
	}
	return first, false, err
}

// attribute reads the click a conversion names and fills in the offer,
// partner and subs from it.
func (s *Service) attribute(ctx context.Context, brandID string, in *ConversionInput) (tally.Click, error) {
	click, err := s.click(ctx, brandID, *in.ClickID)
	if tally.ErrorCode(err) == tally.ECodeNotFound {
		return click, validate.Invalid("clickId %q does not match a recorded click.", *in.ClickID)
	}
	if err != nil {
		return click, err
	}
	if in.OfferID != nil && *in.OfferID != click.OfferID {
		return click, validate.Invalid("offerId %q is not the offer of click %s (%s); leave offerId out or give the click's.", *in.OfferID, click.ID, click.OfferID)
	}
	in.OfferID, in.PartnerID = &click.OfferID, &click.PartnerID
	in.Sub1, in.Sub2, in.Sub3, in.Sub4, in.Sub5 = &click.Sub1, &click.Sub2, &click.Sub3, &click.Sub4, &click.Sub5
	return click, nil
}

// amountsInCurrency refuses a conversion in another currency than its
// offer's that leaves an amount to the offer's default: the default is in
// the offer's currency and would be recorded as if it were in the other.
func amountsInCurrency(offer tally.Offer, in ConversionInput) error {
	if in.Currency == nil || *in.Currency == offer.Currency {
		return nil
	}
	missing := "revenueCents"
	switch {
	case in.RevenueCents != nil && in.PayoutCents != nil:
		return nil
	case in.RevenueCents != nil:
		missing = "payoutCents"
	}
	return validate.InvalidField(missing, "A conversion in %s, not the offer's %s, needs both revenueCents and payoutCents in %s: the offer's amounts are in %s.",
		*in.Currency, offer.Currency, *in.Currency, offer.Currency)
}

// newConversion is the conversion in records for offer. Its payout is
// fixed now: the one posted, else the partner's terms on the offer, else
// the offer's.
func newConversion(id, brandID string, entry offers.Entry, in ConversionInput, now time.Time) tally.Conversion {
	offer := entry.Offer
	c := tally.Conversion{
		ID:            id,
		BrandID:       brandID,
		OfferID:       offer.ID,
		PartnerID:     validate.Deref(in.PartnerID, ""),
		RevenueCents:  validate.Deref(in.RevenueCents, offer.RevenueCents),
		Currency:      validate.Deref(in.Currency, offer.Currency),
		Status:        tally.ConversionApproved,
		Sub1:          validate.Deref(in.Sub1, ""),
		Sub2:          validate.Deref(in.Sub2, ""),
		Sub3:          validate.Deref(in.Sub3, ""),
		Sub4:          validate.Deref(in.Sub4, ""),
		Sub5:          validate.Deref(in.Sub5, ""),
		ExternalTxnID: validate.Deref(in.ExternalTxnID, ""),
		CreatedAt:     tally.NewTime(now),
		UpdatedAt:     tally.NewTime(now),
	}
	c.PayoutCents = validate.Deref(in.PayoutCents, entry.Payout(c.PartnerID, c.RevenueCents))
	if offer.Approval != tally.ApprovalManual {
		c.ApprovedAt = &c.CreatedAt
	} else {
		c.Status = tally.ConversionPending
		if offer.HoldHours > 0 {
			at := tally.NewTime(now.Add(time.Duration(offer.HoldHours) * time.Hour))
			c.ApproveAt = &at
		}
	}
	return c
}

// capState is what a conversion's transaction assumes of one cap: that the
// conversion stays below it, or that it is the one that reaches it.
type capState struct {
	offers.Cap
	key      store.Key
	period   string
	reaching bool
}

// insertConversion writes c with everything that goes with it. It returns
// false when c's (offer, externalTxnId) is already recorded. With
// markerKept, c completes what its marker's request left (replay): the
// marker, which names c's id, is checked rather than put, and false means
// another request completed it first.
//
// Caps are counters with conditions, so the store enforces them under any
// concurrency. A transaction first assumes it stays below every cap (counter
// < limit-1); when that fails for a cap, it tries again as the conversion
// that reaches it (counter == limit-1), which also writes cap.reached: only
// one conversion can find the counter at limit-1, so the event is written
// exactly once. When that fails too, the cap is full. Counters only grow, so
// this ends within one retry per cap.
func (s *Service) insertConversion(ctx context.Context, c tally.Conversion, offer offers.Entry, now time.Time, markerKept bool) (bool, error) {
	var caps []*capState
	for _, cl := range offers.CapsOf(offer.Offer.Caps) {
		period := offers.CapPeriod(cl.Name, now)
		caps = append(caps, &capState{Cap: cl, key: keys.Cap(c.OfferID, period), period: period, reaching: cl.Limit == 1})
	}
	switch {
	case s.writing.apart(c, len(caps)) && markerKept:
		return s.putNew(ctx, c)
	case s.writing.apart(c, len(caps)):
		return s.putConversion(ctx, c)
	}
	created, err := s.writing.created(s, c, now)
	if err != nil {
		return false, err
	}
	for {
		rollups := s.rollups.Conversion(c)
		// Room for all, without growing: an Op is about 300 bytes, and
		// growing from 8 to 16 copied 2.4 KB a conversion.
		ops := make([]store.Op, 0, 6+2*len(caps)+len(rollups))
		markerAt := -1
		switch {
		case markerKept:
			markerAt = len(ops)
			ops = append(ops, store.Check(keys.Txn(c.BrandID, c.OfferID, c.ExternalTxnID), store.Exists()))
		case c.ExternalTxnID != "":
			markerAt = len(ops)
			ops = append(ops, store.Put(txnMarker(c, idJSON(c.ID)), store.NotExists()))
		}
		conversionAt := len(ops)
		ops = append(ops, store.Put(s.newConversionItem(ctx, c), store.NotExists()))
		offerAt, partnerAt := -1, -1
		if s.writing.checks() { // else read just before (admit)
			offerAt, partnerAt = len(ops), len(ops)+1
			ops = append(ops,
				offers.Check(offer),
				store.Check(keys.Partner(c.BrandID, c.PartnerID), store.AttrEquals("status", tally.PartnerActive)),
			)
		}
		capsAt := len(ops)
		var capEvents []store.Op
		for _, cs := range caps {
			cond := store.NumLess("n", cs.Limit-1)
			if cs.reaching {
				cond = store.NumEquals("n", cs.Limit-1)
				evt, err := s.events.Event(c.BrandID, tally.EventCapReached, tally.CapReachedEventData{
					OfferID: c.OfferID, Cap: cs.Name, Limit: cs.Limit, Period: strings.TrimPrefix(cs.period, cs.Name+"#"), ConversionID: c.ID,
				}, now)
				if err != nil {
					return false, err
				}
				capEvents = append(capEvents, evt)
			}
			ops = append(ops, store.Op{Kind: store.OpUpdate, Key: cs.key, Add: map[string]int64{"n": 1},
				ExpiresAt: capExpiry(cs.Name, now), Conds: []store.Cond{cond}})
		}
		clickAt := -1
		if c.ClickID != "" {
			clickAt = len(ops)
			ops = append(ops, attributedOp(c))
		}
		ops = append(ops, rollups...)
		ops = append(ops, created...)
		ops = append(ops, capEvents...)

		err := s.events.Transact(ctx, ops...)
		i, failed := store.FailedOp(err)
		switch {
		case !failed:
			return err == nil, err
		case i == markerAt, i == conversionAt: // recorded, or completed, by another request
			return false, nil
		case i == offerAt:
			return false, s.offers.NotActive(ctx, offer, "conversions")
		case i == partnerAt:
			return false, s.partnerNotActive(ctx, c.BrandID, c.PartnerID)
		case i == clickAt:
			return false, validate.Invalid("clickId %q does not match a recorded click.", c.ClickID)
		case i >= capsAt && i < capsAt+len(caps):
			cs := caps[i-capsAt]
			if cs.reaching {
				return false, tally.Errorf(tally.ECodeCapReached, "Offer %s has reached its %s cap of %d conversions.", c.OfferID, cs.Name, cs.Limit)
			}
			cs.reaching = true
		default:
			return false, fmt.Errorf("record conversion: unexpected condition failure at op %d: %w", i, err)
		}
	}
}

func (s *Service) partnerNotActive(ctx context.Context, brandID, partnerID string) error {
	p, err := s.partners.Partner(ctx, brandID, partnerID)
	if tally.ErrorCode(err) == tally.ECodeNotFound {
		return validate.Invalid("partnerId %q does not match a partner.", partnerID)
	}
	if err != nil {
		return err
	}
	return validate.Invalid("partnerId %q: the partner is %s; conversions are accepted only for active partners.", partnerID, p.Status)
}

// Item places a conversion in its shard, the per-offer and
// per-partner indexes and, while it waits for automatic approval, the hold
// queue.
func Item(c tally.Conversion) store.Item {
	shard := keys.ShardOf(c.ID)
	it := store.Item{
		Key:   keys.Conversion(c.BrandID, c.ID),
		GSI1:  store.IndexKey{PK: keys.ConversionsByOffer(c.BrandID, c.OfferID, shard), SK: c.ID},
		GSI2:  store.IndexKey{PK: keys.ConversionsByPartner(c.BrandID, c.PartnerID, shard), SK: c.ID},
		Attrs: map[string]string{"status": c.Status},
		Data:  conversionJSON(&c),
	}
	if c.Status == tally.ConversionPending && c.ApproveAt != nil {
		it.GSI3 = store.IndexKey{PK: keys.HoldQueuePK(keys.QueueShardOf(c.ID)), SK: keys.HoldQueueSK(c.ApproveAt.Time, c.ID)}
	}
	return it
}

// conversionJSON is json.Marshal(c) without reflection: the conversion's
// item is written on every POST /conversions.
func conversionJSON(c *tally.Conversion) []byte {
	return jsonenc.Conversion(make([]byte, 0, 640), c, jsonenc.EscapeHTML)
}

// idJSON is json.Marshal(id), the body of an idempotency marker.
func idJSON(id string) []byte {
	return jsonenc.String(make([]byte, 0, len(id)+2), id, jsonenc.EscapeHTML)
}

func EventData(c tally.Conversion, reason string) tally.ConversionEventData {
	return tally.ConversionEventData{
		ConversionID: c.ID, PartnerID: c.PartnerID, OfferID: c.OfferID,
		RevenueCents: c.RevenueCents, PayoutCents: c.PayoutCents, Currency: c.Currency,
		Status: c.Status, Sub1: c.Sub1, ExternalTxnID: c.ExternalTxnID, ClickID: c.ClickID, Reason: reason,
	}
}

// capExpiry lets period counters expire well after their period ends.
func capExpiry(cap string, now time.Time) int64 {
	if cap == "global" {
		return 0
	}
	return now.Add(40 * 24 * time.Hour).Unix()
}

// Conversion returns one of the brand's conversions.
func (s *Service) Conversion(ctx context.Context, brandID, conversionID string) (tally.Conversion, error) {
	c, _, err := s.stored(ctx, brandID, conversionID)
	return c, err
}

// stored returns one of the brand's conversions and its item as read,
// whose attributes a change keeps (rewrite).
func (s *Service) stored(ctx context.Context, brandID, conversionID string) (tally.Conversion, store.Item, error) {
	return records.GetItemByID[tally.Conversion](ctx, s.db, "conversion", "cnv_", conversionID, func() store.Key { return keys.Conversion(brandID, conversionID) })
}

// rewrite is the item of c, changed, as read: it keeps the attributes
// only its first write sets (how the stream treats it, the request's
// span), which the reconciler reads to dispatch it again when its stream
// record was lost (webhooks.Engine.StreamConversions).
func rewrite(c tally.Conversion, read store.Item) store.Item {
	item := Item(c)
	for name, v := range read.Attrs {
		if _, set := item.Attrs[name]; !set {
			item.Attrs[name] = v
		}
	}
	return item
}

// ConversionByTxn returns the conversion recorded for an offer with an
// externalTxnId, read through the pair's idempotency marker (kept 400 days
// after the conversion, markerTTL): two reads, no scan. Not found when the
// pair was never recorded, or its conversion is not written yet.
func (s *Service) ConversionByTxn(ctx context.Context, brandID, offerID, externalTxnID string) (tally.Conversion, error) {
	if externalTxnID == "" || !ids.Valid("off_", offerID) {
		return tally.Conversion{}, records.NotFound(store.ErrNotFound, "conversion", externalTxnID)
	}
	first, written, err := s.firstRecorded(ctx, tally.Conversion{BrandID: brandID, OfferID: offerID, ExternalTxnID: externalTxnID})
	if err == nil && !written {
		err = store.ErrNotFound
	}
	return first, records.NotFound(err, "conversion", externalTxnID)
}

// ConversionFilter narrows GET /conversions. From and To are RFC 3339
// timestamps or dates (YYYY-MM-DD; To includes the whole day).
type ConversionFilter struct {
	Status, OfferID, PartnerID, ExternalTxnID string
	From, To                                  string
}

// Conversions lists the brand's conversions, newest first.
func (s *Service) Conversions(ctx context.Context, brandID string, f ConversionFilter, p records.ListParams) ([]tally.Conversion, string, error) {
	if err := validate.OneOf("status", &f.Status, "", tally.ConversionPending, tally.ConversionApproved, tally.ConversionRejected, tally.ConversionReversed); err != nil {
		return nil, "", err
	}
	if err := validate.First(validate.IDFilter("offerId", "off_", f.OfferID), validate.IDFilter("partnerId", "prt_", f.PartnerID)); err != nil {
		return nil, "", err
	}
	sp, err := records.TimeSpan("cnv_", f.From, f.To)
	if err != nil {
		return nil, "", err
	}
	sp.Filter = fmt.Sprintf("%q", []string{f.Status, f.OfferID, f.PartnerID, f.ExternalTxnID})
	sp.Parts = records.ShardedParts(f.OfferID, f.PartnerID,
		func(shard int) string { return keys.ConversionPK(brandID, shard) },
		func(shard int) string { return keys.ConversionsByOffer(brandID, f.OfferID, shard) },
		func(shard int) string { return keys.ConversionsByPartner(brandID, f.PartnerID, shard) })
	keep := func(c *tally.Conversion) bool {
		return (f.Status == "" || c.Status == f.Status) &&
			(f.PartnerID == "" || c.PartnerID == f.PartnerID) &&
			(f.ExternalTxnID == "" || c.ExternalTxnID == f.ExternalTxnID)
	}
	return records.ListSpan(ctx, s.db, sp, p, keep)
}

// ApproveConversion approves a pending conversion.
func (s *Service) ApproveConversion(ctx context.Context, brandID, conversionID string) (tally.Conversion, error) {
	return s.decideConversion(ctx, brandID, conversionID, tally.ConversionApproved, "manual")
}

// RejectConversion rejects a pending conversion.
func (s *Service) RejectConversion(ctx context.Context, brandID, conversionID string) (tally.Conversion, error) {
	return s.decideConversion(ctx, brandID, conversionID, tally.ConversionRejected, "manual")
}

// decideConversion moves a pending conversion to approved or rejected. The
// write holds only while the conversion is still pending, so of two racing
// decisions (say a manual rejection and the hold-time approval) exactly one
// takes effect.
func (s *Service) decideConversion(ctx context.Context, brandID, conversionID, to, reason string) (tally.Conversion, error) {
	c, read, err := s.stored(ctx, brandID, conversionID)
	if err != nil {
		return c, err
	}
	verb := map[string]string{tally.ConversionApproved: "approve", tally.ConversionRejected: "reject"}[to]
	if c.Status != tally.ConversionPending {
		return c, tally.Errorf(tally.ECodeInvalidTransition, "Cannot %s a conversion whose status is %q; only pending conversions can be.", verb, c.Status)
	}
	// A decision comes after the conversion's record, even on a clock a
	// little behind the one that recorded it: an approval at its createdAt
	// would read as an approval on creation (AsCreated).
	now := s.db.Now()
	if !tally.NewTime(now).After(c.CreatedAt.Time) { // in the milliseconds it is stored in
		now = c.CreatedAt.Add(time.Millisecond)
	}
	c.Status, c.UpdatedAt, c.ApproveAt = to, tally.NewTime(now), nil
	if to == tally.ConversionApproved {
		c.ApprovedAt = &c.UpdatedAt
	}
	name := map[string]string{tally.ConversionApproved: tally.EventConversionApproved, tally.ConversionRejected: tally.EventConversionRejected}[to]
	evt, err := s.events.Event(brandID, name, EventData(c, reason), now)
	if err != nil {
		return c, err
	}
	ops := append([]store.Op{store.Put(rewrite(c, read), store.AttrEquals("status", tally.ConversionPending))}, reports.ConversionIncrements(c, reports.Decided(c, to))...)
	ops = append(ops, ledger.Decided(c)...)
	ops = append(ops, audit.Record(ctx, brandID, name, c.ID, auditSummary(c, tally.ConversionPending), now)...)
	err = s.events.Transact(ctx, append(ops, evt)...)
	if _, failed := store.FailedOp(err); failed {
		current, err := s.Conversion(ctx, brandID, conversionID)
		if err != nil {
			return current, err
		}
		return current, tally.Errorf(tally.ECodeInvalidTransition, "Cannot %s a conversion whose status is %q; only pending conversions can be.", verb, current.Status)
	}
	if err == nil {
		s.entered(to)
	}
	return c, err
}

// attributedOp marks the click a conversion names with the conversion; it
// fails if the click is gone (expired since it was read).
func attributedOp(c tally.Conversion) store.Op {
	return store.Op{Kind: store.OpUpdate, Key: keys.Click(c.BrandID, c.ClickID),
		Set: map[string]string{"conversionId": c.ID}, Conds: []store.Cond{store.Exists()}}
}

// FanOutAttr marks a conversion item whose event the fan-out makes from the
// stream (the fan-out's stream filter passes its insert).
const (
	FanOutAttr       = "fanout"
	FanOutFromStream = "stream"
)

// newConversionItem is the item of a new conversion, marked for what the
// stream does with it.
func (s *Service) newConversionItem(ctx context.Context, c tally.Conversion) store.Item {
	item := Item(c)
	s.rollups.MarkConversion(&item)
	s.writing.mark(ctx, &item)
	return item
}

// markerTTL is how long after its conversion an (offer, externalTxnId)
// idempotency marker is kept, and the same pair replays the first
// conversion: longer than any window in which the pair can come again for
// the same conversion. The longest is a GET postback without txn_id, whose
// click id is the pair's id: it converts while the offer's attribution
// window (at most 365 days) lasts. The 35 days more cover advertisers
// resending late and the pipeline's own windows (DLQs keep 14 days).
const markerTTL = 400 * 24 * time.Hour

// txnMarker is c's idempotency marker holding data.
func txnMarker(c tally.Conversion, data []byte) store.Item {
	return store.Item{Key: keys.Txn(c.BrandID, c.OfferID, c.ExternalTxnID), Data: data, ExpiresAt: c.CreatedAt.Add(markerTTL).Unix()}
}

// putConversion writes a conversion without caps or click apart
// (ForStream): its marker, holding its id, first, which makes this request
// the conversion's creator, then the conversion. It returns false when
// another request's marker is there, or when a retry completing the
// conversion wrote it first (replay reads it then).
func (s *Service) putConversion(ctx context.Context, c tally.Conversion) (bool, error) {
	if c.ExternalTxnID != "" {
		err := s.events.Transact(ctx, store.Put(txnMarker(c, idJSON(c.ID)), store.NotExists()))
		if _, exists := store.FailedOp(err); exists {
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	return s.putNew(ctx, c)
}

// putNew writes c unless a conversion with its id is there: false then.
func (s *Service) putNew(ctx context.Context, c tally.Conversion) (bool, error) {
	err := s.events.Transact(ctx, store.Put(s.newConversionItem(ctx, c), store.NotExists()))
	if _, exists := store.FailedOp(err); exists {
		return false, nil
	}
	return err == nil, err
}

// firstRecorded reads c's (offer, externalTxnId) marker and the conversion
// it names. written is false when that conversion is not there: the
// request that wrote the marker stopped before the conversion (putConversion),
// or is still writing it; the conversion returned is then c with the
// marker's id, or, for a marker holding the whole conversion (written by
// older code), that conversion.
func (s *Service) firstRecorded(ctx context.Context, c tally.Conversion) (first tally.Conversion, written bool, err error) {
	marker, err := s.db.Get(ctx, keys.Txn(c.BrandID, c.OfferID, c.ExternalTxnID))
	if err != nil {
		return first, false, err
	}
	first = c
	if json.Unmarshal(marker.Data, &first.ID) != nil {
		first = tally.Conversion{}
		if err := records.Decode(marker, &first); err != nil {
			return first, false, err
		}
	}
	stored, err := records.Get[tally.Conversion](ctx, s.db, keys.Conversion(first.BrandID, first.ID))
	if errors.Is(err, store.ErrNotFound) {
		return first, false, nil
	}
	return stored, err == nil, err
}

// replay returns the conversion first recorded for c's (offer,
// externalTxnId). When its marker's request left the conversion unwritten
// (firstRecorded), this request writes it, from its own body with the
// marker's id, and answers created; of requests racing to, one writes it
// and the others read it.
func (s *Service) replay(ctx context.Context, c tally.Conversion, offer offers.Entry, now time.Time) (tally.Conversion, bool, error) {
	first, written, err := s.firstRecorded(ctx, c)
	if err != nil || written {
		return first, false, err
	}
	if !s.writing.completes() { // its marker and conversion are one transaction
		return first, false, fmt.Errorf("replay: the marker of %q names conversion %s, which is not there: %w", c.ExternalTxnID, first.ID, store.ErrNotFound)
	}
	created, err := s.insertConversion(ctx, first, offer, now, true)
	if err != nil || created {
		return first, created, err
	}
	stored, err := records.Get[tally.Conversion](ctx, s.db, keys.Conversion(first.BrandID, first.ID))
	return stored, false, err
}

// Writing is how a new conversion is written: InTransaction or ForStream.
type Writing interface {
	// offer reads the offer of a new conversion.
	offer(s *Service) func(ctx context.Context, brandID, offerID string) (offers.Entry, error)
	// admit refuses, before the write, a conversion whose offer or partner
	// is not active, where the write does not check them.
	admit(ctx context.Context, s *Service, offer tally.Offer, c tally.Conversion) error
	// apart says whether c, with caps caps, is written without a
	// transaction (putConversion).
	apart(c tally.Conversion, caps int) bool
	// checks says whether the transaction checks the offer's and the
	// partner's status.
	checks() bool
	// completes says whether a marker can be there without its
	// conversion (written apart, before it), which a retry completes.
	completes() bool
	// created is what c's transaction writes for its conversion.created.
	created(s *Service, c tally.Conversion, now time.Time) ([]store.Op, error)
	// mark marks a new conversion's item for what the stream does with it.
	mark(ctx context.Context, item *store.Item)
}

// InTransaction writes a new conversion in one transaction with its
// idempotency marker, cap counters, the checks of its offer's and
// partner's status and its conversion.created event: where one write is
// one commit and the outbox index feeds the delivery pipeline (the local
// server, on either store).
type InTransaction struct{}

func (InTransaction) offer(s *Service) func(context.Context, string, string) (offers.Entry, error) {
	return s.offers.Cached
}

func (InTransaction) admit(context.Context, *Service, tally.Offer, tally.Conversion) error {
	return nil
}

func (InTransaction) apart(tally.Conversion, int) bool { return false }
func (InTransaction) checks() bool                     { return true }
func (InTransaction) completes() bool                  { return false }

func (InTransaction) created(s *Service, c tally.Conversion, now time.Time) ([]store.Op, error) {
	evt, err := s.events.Event(c.BrandID, tally.EventConversionCreated, EventData(c, ""), now)
	return []store.Op{evt}, err
}

func (InTransaction) mark(context.Context, *store.Item) {}

// ForStream writes new conversions as the AWS functions want them
// (docs/aws.md, "Cost of the webhook pipeline"), where each
// item of a transaction bills twice and the table's stream carries every
// insert to the fan-out:
//
//   - the offer's and the partner's status are read, strongly consistent,
//     right before the write, not checked in it (a conversion racing a
//     pause or a ban by milliseconds is accepted, as if it had come just
//     before; docs/decisions.md);
//   - a conversion without caps and without clickId is written as two
//     conditional puts, no transaction: its idempotency marker (holding
//     its id), then the conversion. A request that finds the marker and not
//     the conversion completes what a crash between them left (replay);
//     caps and clickId keep the transaction, which their counters and the
//     click's update need;
//   - its conversion.created event is not written by the request: the
//     fan-out makes it from the conversion's insert in the stream
//     (webhooks.Engine.DispatchConversion). A stream batch the fan-out
//     gives up on leaves its arrival times in FanoutDLQ, and the
//     reconciler dispatches again the conversions marked for the stream
//     (FanOutAttr) that were created then (webhooks.Engine.StreamConversions).
//
// The local server (either store) keeps the one transaction with the
// event: its pipeline drains the outbox index, not a stream.
type ForStream struct{}

func (ForStream) offer(s *Service) func(context.Context, string, string) (offers.Entry, error) {
	return s.offers.Load // its status as of now: the write checks nothing (admit)
}

func (ForStream) admit(ctx context.Context, s *Service, offer tally.Offer, c tally.Conversion) error {
	return s.activeNow(ctx, offer, c.PartnerID)
}

func (ForStream) apart(c tally.Conversion, caps int) bool { return caps == 0 && c.ClickID == "" }
func (ForStream) checks() bool                            { return false }
func (ForStream) completes() bool                         { return true }

func (ForStream) created(*Service, tally.Conversion, time.Time) ([]store.Op, error) {
	return nil, nil // the fan-out makes the event from the stream
}

// mark marks the item for the fan-out, which makes its event with the
// request's span.
func (ForStream) mark(ctx context.Context, item *store.Item) {
	item.Attrs[FanOutAttr] = FanOutFromStream
	trace.Keep(ctx, item.Attrs)
}
