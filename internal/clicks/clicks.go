// Package clicks records the clicks of tracking links, each scored for
// fraud (package fraud) against the brand's settings and blocklist, and
// keeps those settings, including the rule that bans a partner whose
// high-risk clicks pile up.
package clicks

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/fraud"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/jsonenc"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service records clicks and keeps the brands' fraud settings.
type Service struct {
	db       *records.DB
	events   *outbox.Writer
	offers   *offers.Service
	partners partnerReader
	rollups  reports.Rollups
	// configs are the brands' fraud settings and blocklists; a change
	// reaches other instances within the cache's TTL.
	configs *records.Cache[fraudConfig]
	// observer is told of each click recorded; nil: nobody is.
	observer Observer
	// reached remembers the velocity counters this instance saw reach
	// maxClicksPerMinute or a ClickInput's Limit in their minute.
	reached *ratelimit.Reached
}

// Observer is told of each click recorded, for metrics.
type Observer interface {
	ClickRecorded()
}

// partnerReader reads the partner a click names.
type partnerReader interface {
	Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error)
}

// New returns the Service over db, writing through events, with the
// offers and partners of the links clicked, keeping rollups as rollups
// says, and telling observer (nil: nobody) of each click recorded. An
// instance trusts the fraud settings it read for cacheTTL.
func New(db *records.DB, events *outbox.Writer, o *offers.Service, p partnerReader, rollups reports.Rollups, cacheTTL time.Duration, observer Observer) *Service {
	return &Service{db: db, events: events, offers: o, partners: p, rollups: rollups,
		configs: records.NewCache[fraudConfig](cacheTTL, db.Clock), observer: observer, reached: ratelimit.NewReached()}
}

// ClickInput is what a tracking link request carries: the offer from the
// path, the partner (pid) and sub1–sub5 from the query, and what the
// request says about the visitor.
type ClickInput struct {
	OfferID   string
	PartnerID string
	Subs      [5]string
	IP        netip.Addr
	UserAgent string
	Referer   string
	// Limit is how many clicks a minute from IP on the offer are recorded
	// at most; 0: no limit.
	Limit int
}

// ErrOverLimit answers a click past its Limit: it is not recorded, and the
// visitor is sent to the offer's destination untracked.
var ErrOverLimit = errors.New("clicks: over the limit of clicks a minute from this address on this offer")

// Limits of what a click stores of the visitor's headers. Longer values are
// cut, not refused: the visitor's browser wrote them, not the partner.
const (
	maxUserAgent = 512
	maxReferer   = 2048
)

// clickRetention is how long a click is kept beyond its offer's
// attribution window before the table may delete it.
const clickRetention = 7 * 24 * time.Hour

var subFields = [...]string{"sub1", "sub2", "sub3", "sub4", "sub5"}

func (in ClickInput) validate() error { return ValidateSubs(in.Subs) }

// ValidateSubs checks sub1–sub5 as a tracking link's query gives them: a
// link whose subs fail it records no click.
func ValidateSubs(subs [5]string) error {
	for i, v := range subs {
		if err := validate.Text(subFields[i], &v, false, 255); err != nil {
			return err
		}
	}
	return nil
}

// RecordClick records a visit through a partner's tracking link and returns
// the click and the URL to redirect the visitor to. The offer must be active
// and the partner active; otherwise it answers a *NotServed and stores
// nothing. An offer with a fallback URL whose cap is reached for the period
// answers a *NotServed too.
// A click past in.Limit answers ErrOverLimit with the URL to redirect to,
// the macros filled but {click_id} empty: the partner is not checked, and
// nothing is written once this instance has seen the limit reached in the
// minute (the first such click costs the failed transaction that finds it).
func (s *Service) RecordClick(ctx context.Context, in ClickInput) (tally.Click, string, error) {
	for attempt := 0; ; attempt++ {
		offer, err := s.offers.ByID(ctx, in.OfferID)
		if err != nil {
			return tally.Click{}, "", err
		}
		if offer.Offer.Status != tally.OfferActive {
			return tally.Click{}, "", notServed(offer.Offer, in, records.NotFound(store.ErrNotFound, "offer", in.OfferID))
		}
		if !ids.Valid("prt_", in.PartnerID) {
			return tally.Click{}, "", notServed(offer.Offer, in, noActivePartner())
		}
		if err := in.validate(); err != nil {
			return tally.Click{}, "", err
		}
		if offer.Offer.FallbackURL != "" && offer.Offer.Caps != (tally.Caps{}) {
			capped, err := s.offers.CapReached(ctx, offer.Offer, s.db.Now())
			if err != nil {
				return tally.Click{}, "", err
			}
			if capped {
				return tally.Click{}, "", notServed(offer.Offer, in, errCapped)
			}
		}
		c, err := s.insertClick(ctx, offer, in)
		if err == offers.ErrChanged && attempt < offers.MaxReloads {
			continue
		}
		if err == ErrOverLimit {
			return tally.Click{}, offers.FillMacros(offer.Offer.DestinationURL, untracked(in)), err
		}
		if tally.ErrorCode(err) == tally.ECodeNotFound { // the offer paused or the partner not active meanwhile
			return tally.Click{}, "", notServed(offer.Offer, in, err)
		}
		if err != nil {
			return tally.Click{}, "", err
		}
		if s.observer != nil {
			s.observer.ClickRecorded()
		}
		return c, offers.FillMacros(offer.Offer.DestinationURL, c), nil
	}
}

// untracked is the click a link would have made, without an id: what fills
// the macros of a URL a visitor is sent to when no click is recorded.
func untracked(in ClickInput) tally.Click {
	return tally.Click{OfferID: in.OfferID, PartnerID: in.PartnerID,
		Sub1: in.Subs[0], Sub2: in.Subs[1], Sub3: in.Subs[2], Sub4: in.Subs[3], Sub5: in.Subs[4]}
}

// NotServed answers a link of a known offer that takes no click now: the
// offer is paused or capped, or the link names no active partner. Nothing
// is recorded. Fallback is the offer's fallback URL with the macros filled
// ({click_id} empty), "" when it has none; Err is the answer without one.
type NotServed struct {
	Fallback string
	Err      error
}

func (e *NotServed) Error() string { return e.Err.Error() }
func (e *NotServed) Unwrap() error { return e.Err }

// errCapped is a capped offer's answer, which is given only to send the
// visitor to its fallback: without one, a capped offer's clicks are recorded.
var errCapped = tally.Errorf(tally.ECodeNotFound, "The offer has reached a cap.")

func notServed(o tally.Offer, in ClickInput, err error) error {
	e := &NotServed{Err: err}
	if o.FallbackURL != "" {
		e.Fallback = offers.FillMacros(o.FallbackURL, untracked(in))
	}
	return e
}

// maxClicksPerMinute is how many clicks one address may make on one offer
// in a minute before the next ones raise ip_velocity.
const maxClicksPerMinute = 10

// velocity is a click's velocity counter: its key and its minute.
type velocity struct {
	key    store.Key
	minute time.Time
}

// insertClick scores and writes a click in one transaction with its rollup
// (unless reports.FromStream),
// its counters, and the events it causes. Counters with conditions decide,
// exactly under any concurrency, what the transaction first assumes: that
// the address is not making its 11th click on the offer this minute, and
// that this high-risk click does not bring the partner's count to the
// auto-ban rule's limit. When a condition fails, the click is scored or
// written again as the one that crosses the line.
func (s *Service) insertClick(ctx context.Context, offer offers.Entry, in ClickInput) (tally.Click, error) {
	now := s.db.Now()
	o := offer.Offer
	fc, err := s.fraudConfig(ctx, o.BrandID)
	if err != nil {
		return tally.Click{}, err
	}
	c := tally.Click{
		ID:        s.db.NewID("clk_", now),
		BrandID:   o.BrandID,
		OfferID:   o.ID,
		PartnerID: in.PartnerID,
		UserAgent: truncate(in.UserAgent, maxUserAgent),
		Referer:   truncate(in.Referer, maxReferer),
		Sub1:      in.Subs[0],
		Sub2:      in.Subs[1],
		Sub3:      in.Subs[2],
		Sub4:      in.Subs[3],
		Sub5:      in.Subs[4],
		CreatedAt: tally.NewTime(now),
	}
	if in.IP.IsValid() {
		c.IP = in.IP.String()
	}
	visitor := fraud.Visitor{IP: in.IP, UserAgent: in.UserAgent, Blocked: fc.blocked}
	window := time.Duration(o.AttributionWindowDays) * 24 * time.Hour
	rule := fc.settings.AutoBan
	banLimit := int64(-1)  // high-risk clicks this hour below which this one bans nobody; -1: not read yet
	var ban *tally.Partner // the partner, when this click bans it
	var vel velocity
	if in.IP.IsValid() {
		// The counter decides, exactly, whether this click is a burst and
		// whether it is past the limit; what this instance saw it reach
		// in this minute spares it the failed transaction that says so.
		vel = velocity{keys.Velocity(c.OfferID, c.IP, now.Truncate(time.Minute).Unix()), now.Truncate(time.Minute)}
		if in.Limit > 0 && s.reached.Has(vel.key.PK, vel.minute, time.Minute, in.Limit) {
			return c, ErrOverLimit
		}
		visitor.Burst = s.reached.Has(vel.key.PK, vel.minute, time.Minute, maxClicksPerMinute)
	}

	for attempt := 0; ; attempt++ {
		c.FraudSignals = fraud.Signals(visitor)
		c.FraudScore = fraud.Score(c.FraudSignals)
		highRisk := c.FraudScore > fc.settings.Threshold
		if highRisk && rule.Enabled && banLimit < 0 {
			earlier, err := s.earlierHighRiskClicks(ctx, c, rule.WindowHours)
			if err != nil {
				return c, err
			}
			banLimit = max(int64(rule.HighRiskClicks)-1-earlier, 0)
		}
		if highRisk && rule.Enabled && banLimit == 0 && ban == nil {
			if ban, err = s.partnerToBan(ctx, c); err != nil {
				return c, err
			}
		}

		// Room for every op a click may have: growing the slice op by op
		// was most of this function's allocation.
		ops := make([]store.Op, 0, 9)
		item := clickItem(c, now.Add(window+clickRetention))
		s.rollups.MarkClick(&item, o.Currency, highRisk)
		ops = append(ops, store.Put(item))
		offerAt, partnerAt := len(ops), len(ops)+1
		ops = append(ops, offers.Check(offer))
		if ban != nil {
			ops = append(ops, store.Put(partners.Item(*ban), store.AttrEquals("status", tally.PartnerActive)))
		} else {
			ops = append(ops, store.Check(keys.Partner(c.BrandID, c.PartnerID), store.AttrEquals("status", tally.PartnerActive)))
		}
		ops = append(ops, s.rollups.Add(c.BrandID, c.ID, now, c.OfferID, c.PartnerID, o.Currency, reports.ClickCounts(highRisk))...)
		velocityAt := -1
		if in.IP.IsValid() {
			velocityAt = len(ops)
			op := store.Increment(vel.key, map[string]int64{"n": 1})
			op.ExpiresAt = vel.minute.Add(time.Hour).Unix()
			if below := velocityBound(visitor.Burst, in.Limit); below > 0 {
				op.Conds = []store.Cond{store.NumLess("n", below)}
			}
			ops = append(ops, op)
		}
		highRiskAt := -1
		if highRisk {
			highRiskAt = len(ops)
			op := store.Increment(keys.HighRisk(c.BrandID, c.PartnerID, now), map[string]int64{"n": 1})
			op.ExpiresAt = now.Add((maxBanWindowHours + 1) * time.Hour).Unix()
			if rule.Enabled && ban == nil {
				op.Conds = []store.Cond{store.NumLess("n", banLimit)}
			}
			evt, err := s.events.Event(c.BrandID, tally.EventFraudHighRisk, tally.FraudEventData{
				ClickID: c.ID, OfferID: c.OfferID, PartnerID: c.PartnerID, Score: c.FraudScore, Threshold: fc.settings.Threshold,
				Signals: c.FraudSignals, IP: c.IP, UserAgent: c.UserAgent,
			}, now)
			if err != nil {
				return c, err
			}
			ops = append(ops, op, evt)
		}
		if ban != nil {
			data := partners.EventData(*ban, tally.PartnerActive)
			data.Reason, data.Rule = tally.BanAutomation, tally.RuleHighRiskClicks
			evt, err := s.events.Event(c.BrandID, tally.EventPartnerBanned, data, now)
			if err != nil {
				return c, err
			}
			ops = append(ops, evt, audit.Op(audit.Rule("Auto-ban rule"), c.BrandID, audit.PartnerBanned, ban.ID,
				fmt.Sprintf("%s (%s): %d high-risk clicks within %d hours", ban.Name, ban.Email, fc.settings.AutoBan.HighRiskClicks, fc.settings.AutoBan.WindowHours), now))
		}

		err := s.events.Transact(ctx, ops...)
		i, failed := store.FailedOp(err)
		switch {
		case !failed:
			return c, err
		case attempt == 8:
			return c, fmt.Errorf("record click: conditions keep failing: %w", err)
		case i == offerAt:
			if err := s.offers.NotActive(ctx, offer, "clicks"); err != offers.ErrChanged {
				return c, records.NotFound(store.ErrNotFound, "offer", c.OfferID)
			}
			return c, offers.ErrChanged
		case i == partnerAt:
			return c, noActivePartner()
		case i == velocityAt && (visitor.Burst || in.Limit > 0 && in.Limit <= maxClicksPerMinute):
			s.reached.Mark(vel.key.PK, vel.minute, time.Minute, in.Limit)
			return c, ErrOverLimit
		case i == velocityAt:
			s.reached.Mark(vel.key.PK, vel.minute, time.Minute, maxClicksPerMinute)
			visitor.Burst = true
		case i == highRiskAt:
			banLimit = 0 // this click reaches the rule's limit
		default:
			return c, fmt.Errorf("record click: unexpected condition failure at op %d: %w", i, err)
		}
	}
}

// velocityBound is the count the velocity counter must be below for the
// click to be written as it is scored: below maxClicksPerMinute for a
// click not yet known to be a burst, below limit for one that is; 0: no
// condition.
func velocityBound(burst bool, limit int) int64 {
	switch {
	case !burst && limit > 0:
		return int64(min(limit, maxClicksPerMinute))
	case !burst:
		return maxClicksPerMinute
	}
	return int64(limit)
}

// earlierHighRiskClicks counts the partner's high-risk clicks in the
// auto-ban window's whole UTC hours before the current one.
func (s *Service) earlierHighRiskClicks(ctx context.Context, c tally.Click, windowHours int) (int64, error) {
	if windowHours <= 1 {
		return 0, nil
	}
	hour := c.CreatedAt.Truncate(time.Hour)
	q := store.Query{PK: keys.HighRiskPK(c.BrandID, c.PartnerID), Limit: maxBanWindowHours,
		SKFrom: keys.HighRiskHour(hour.Add(-time.Duration(windowHours-1) * time.Hour)), SKTo: keys.HighRiskHour(hour.Add(-time.Hour))}
	var n int64
	for {
		page, err := s.db.Query(ctx, q)
		if err != nil {
			return 0, err
		}
		for _, it := range page.Items {
			n += it.Nums["n"]
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			return n, nil
		}
	}
}

// partnerToBan returns the click's partner as the auto-ban rule leaves it,
// or not_found when it is no longer active.
func (s *Service) partnerToBan(ctx context.Context, c tally.Click) (*tally.Partner, error) {
	p, err := s.partners.Partner(ctx, c.BrandID, c.PartnerID)
	if tally.ErrorCode(err) == tally.ECodeNotFound || (err == nil && p.Status != tally.PartnerActive) {
		return nil, noActivePartner()
	}
	if err != nil {
		return nil, err
	}
	p.Status, p.UpdatedAt = tally.PartnerBanned, c.CreatedAt
	return &p, nil
}

// noActivePartner answers a link whose pid is missing, unknown or not
// active, alike: a link tells nothing about the brand's partners.
func noActivePartner() error {
	return tally.Errorf(tally.ECodeNotFound, "The link names no active partner of this offer (pid).")
}

// clickItem places a click in its shard and the per-offer and per-partner
// indexes; the table may delete it after expires.
func clickItem(c tally.Click, expires time.Time) store.Item {
	shard := keys.ShardOf(c.ID)
	return store.Item{
		Key:       keys.Click(c.BrandID, c.ID),
		GSI1:      store.IndexKey{PK: keys.ClicksByOffer(c.BrandID, c.OfferID, shard), SK: c.ID},
		GSI2:      store.IndexKey{PK: keys.ClicksByPartner(c.BrandID, c.PartnerID, shard), SK: c.ID},
		Data:      jsonenc.Click(make([]byte, 0, 512), &c, jsonenc.EscapeHTML), // json.Marshal(c), without reflection
		ExpiresAt: expires.Unix(),
	}
}

// truncate cuts a header's value to at most n characters, valid UTF-8 in
// which invalid bytes and the characters text fields refuse (bidi
// overrides, line separators; see plainText) are U+FFFD: a header is kept
// rather than refused, but may not make stored text read as something else.
func truncate(s string, n int) string {
	if len(s) <= n && printableASCII(s) { // most headers: nothing to replace or cut
		return s
	}
	s = strings.Map(func(r rune) rune {
		if validate.Hidden(r, false) {
			return utf8.RuneError
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// clickRecord is a stored click: the conversion attributed to it last is an
// attribute of its item, which the conversion's transaction sets.
type clickRecord struct{ tally.Click }

func (r *clickRecord) FromItem(it store.Item) { r.ConversionID = it.Attrs["conversionId"] }

// Click returns one of the brand's clicks.
func (s *Service) Click(ctx context.Context, brandID, clickID string) (tally.Click, error) {
	rec, err := records.GetByID[clickRecord](ctx, s.db, "click", "clk_", clickID, func() store.Key { return keys.Click(brandID, clickID) })
	return rec.Click, err
}

// ClickFilter narrows GET /clicks. MinScore is "" or a score from 0 to 100;
// From and To are RFC 3339 timestamps or dates, as for conversions.
type ClickFilter struct {
	OfferID, PartnerID string
	MinScore           string
	From, To           string
}

// Clicks lists the brand's clicks, newest first.
func (s *Service) Clicks(ctx context.Context, brandID string, f ClickFilter, p records.ListParams) ([]tally.Click, string, error) {
	if err := validate.First(validate.IDFilter("offerId", "off_", f.OfferID), validate.IDFilter("partnerId", "prt_", f.PartnerID)); err != nil {
		return nil, "", err
	}
	minScore := 0
	if f.MinScore != "" {
		var err error
		if minScore, err = strconv.Atoi(f.MinScore); err != nil || strconv.Itoa(minScore) != f.MinScore || minScore < 0 || minScore > 100 {
			return nil, "", validate.Invalid("minScore must be a whole number from 0 to 100.")
		}
	}
	sp, err := records.TimeSpan("clk_", f.From, f.To)
	if err != nil {
		return nil, "", err
	}
	sp.Filter = fmt.Sprintf("%q", []string{f.OfferID, f.PartnerID, f.MinScore})
	sp.Parts = records.ShardedParts(f.OfferID, f.PartnerID,
		func(shard int) string { return keys.ClickPK(brandID, shard) },
		func(shard int) string { return keys.ClicksByOffer(brandID, f.OfferID, shard) },
		func(shard int) string { return keys.ClicksByPartner(brandID, f.PartnerID, shard) })
	keep := func(c *clickRecord) bool {
		return (f.PartnerID == "" || c.PartnerID == f.PartnerID) && c.FraudScore >= minScore
	}
	recs, next, err := records.ListSpan(ctx, s.db, sp, p, keep)
	clicks := make([]tally.Click, len(recs))
	for i, r := range recs {
		clicks[i] = r.Click
	}
	return clicks, next, err
}
