package portalaccess

import (
	"context"
	"net/url"
	"strconv"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/store"
)

// Views are what a signed-in partner sees of its brand's data: its own
// numbers, money, conversions, links and postback, read through the
// brand's services narrowed to the session's partner. The partner and
// brand always come from the session, never from the request, and what
// they answer has no field for revenue, profit or another partner.
type Views struct {
	src Sources
}

// Sources are the services Views read (the brand's own).
type Sources struct {
	Offers      offerLister
	Reports     reporter
	Conversions conversionLister
	Payouts     payoutReader
	Postbacks   postbacks
	Deliveries  deliveryLog
}

type offerLister interface {
	OffersWithTerms(ctx context.Context, brandID string, p records.ListParams) ([]offers.Listed, string, error)
}

type reporter interface {
	Report(ctx context.Context, brandID string, q reports.ReportQuery) (reports.Report, error)
}

type conversionLister interface {
	Conversions(ctx context.Context, brandID string, f conversions.ConversionFilter, p records.ListParams) ([]tally.Conversion, string, error)
}

type payoutReader interface {
	Balance(ctx context.Context, brandID, partnerID string) (payouts.Balances, error)
	PartnerLines(ctx context.Context, brandID, partnerID string, p records.ListParams) ([]payouts.PartnerLine, string, error)
}

type postbacks interface {
	Postback(ctx context.Context, brandID, partnerID string) (tally.Postback, error)
	PutPostback(ctx context.Context, brandID, partnerID string, in endpoints.PostbackInput) (tally.Postback, error)
	DeletePostback(ctx context.Context, brandID, partnerID string) (tally.Postback, error)
	SendTestPostback(ctx context.Context, brandID, partnerID string) (tally.Event, error)
}

type deliveryLog interface {
	Deliveries(ctx context.Context, brandID string, f endpoints.DeliveryFilter, p records.ListParams) ([]tally.Delivery, string, error)
	Delivery(ctx context.Context, brandID, deliveryID string) (tally.Delivery, error)
}

// NewViews returns the Views over src.
func NewViews(src Sources) *Views { return &Views{src: src} }

// OverviewDays is the span of the Overview's numbers: the last 30 UTC
// days, today included.
const OverviewDays = 30

// Stats are a partner's numbers in one currency over a span.
type Stats struct {
	Currency    string
	Clicks      int64
	Conversions int64
	Pending     int64
	Approved    int64
	Rejected    int64
	Reversed    int64
	// EarnedCents: the payouts of its conversions that are pending or
	// approved.
	EarnedCents int64
	// EPCCents is earnings per click, rounded half up to the cent; 0
	// without clicks.
	EPCCents int64
}

// Overview is the portal's first page: the partner's numbers of the last
// OverviewDays and its balance, per currency.
type Overview struct {
	From, To string
	Stats    []Stats
	Balances []tally.Balance
}

// Overview returns the partner's numbers of the last OverviewDays (from
// the report rollups) and its balance.
func (v *Views) Overview(ctx context.Context, sess Session) (Overview, error) {
	rep, err := v.src.Reports.Report(ctx, sess.BrandID, reports.ReportQuery{PartnerID: sess.PartnerID})
	if err != nil {
		return Overview{}, err
	}
	o := Overview{From: rep.From, To: rep.To, Stats: []Stats{}}
	for _, r := range rep.Data {
		st := Stats{Currency: r.Currency, Clicks: r.Clicks, Conversions: r.Conversions, Pending: r.Pending,
			Approved: r.Approved, Rejected: r.Rejected, Reversed: r.Reversed, EarnedCents: r.PayoutCents}
		if r.Clicks > 0 {
			st.EPCCents = (2*r.PayoutCents + r.Clicks) / (2 * r.Clicks)
		}
		o.Stats = append(o.Stats, st)
	}
	b, err := v.src.Payouts.Balance(ctx, sess.BrandID, sess.PartnerID)
	o.Balances = b.Data
	return o, err
}

// Link is the partner's tracking link for an active offer, with what a
// conversion of it pays the partner: PayoutCents, or PayoutPercent of the
// sale when set.
type Link struct {
	OfferID       string
	OfferName     string
	Currency      string
	PayoutCents   int64
	PayoutPercent *tally.Percent
	// Path is the tracking link's path and query on {public_base_url}.
	Path string
}

// maxOffers bounds the offers the Links page and the offer names read.
const maxOffers = 1000

// Links returns the partner's tracking link for each of the brand's
// active offers, newest offer first, each with the partner's own payout
// terms where it has them.
func (v *Views) Links(ctx context.Context, sess Session) ([]Link, error) {
	links := []Link{}
	err := v.eachOffer(ctx, sess.BrandID, func(o offers.Listed) {
		if o.Status != tally.OfferActive {
			return
		}
		l := Link{OfferID: o.ID, OfferName: o.Name, Currency: o.Currency, PayoutCents: o.PayoutCents, PayoutPercent: o.PayoutPercent,
			Path: TrackingPath(o.ID, sess.PartnerID, [5]string{})}
		if t, ok := o.Terms[sess.PartnerID]; ok {
			l.PayoutCents, l.PayoutPercent = 0, t.PayoutPercent
			if t.PayoutCents != nil {
				l.PayoutCents = *t.PayoutCents
			}
		}
		links = append(links, l)
	})
	return links, err
}

func (v *Views) eachOffer(ctx context.Context, brandID string, fn func(offers.Listed)) error {
	p := records.ListParams{Limit: 100}
	for n := 0; n < maxOffers; n += p.Limit {
		list, next, err := v.src.Offers.OffersWithTerms(ctx, brandID, p)
		if err != nil {
			return err
		}
		for _, o := range list {
			fn(o)
		}
		if p.Cursor = next; next == "" {
			break
		}
	}
	return nil
}

// TrackingPath is the tracking link of an offer for a partner, with the
// sub-IDs that are not empty.
func TrackingPath(offerID, partnerID string, subs [5]string) string {
	q := "pid=" + url.QueryEscape(partnerID)
	for i, s := range subs {
		if s != "" {
			q += "&sub" + strconv.Itoa(i+1) + "=" + url.QueryEscape(s)
		}
	}
	return "/c/" + url.PathEscape(offerID) + "?" + q
}

// Conversion is a partner's view of one of its conversions: what it
// earns, never what the brand earned.
type Conversion struct {
	ID             string
	OfferID        string
	OfferName      string
	Status         string
	PayoutCents    int64
	Currency       string
	Sub1, Sub2     string
	Sub3, Sub4     string
	Sub5           string
	ReversalReason string
	CreatedAt      tally.Time
}

// Conversions lists the partner's conversions, newest first, optionally
// only those with status.
func (v *Views) Conversions(ctx context.Context, sess Session, status string, p records.ListParams) ([]Conversion, string, error) {
	list, next, err := v.src.Conversions.Conversions(ctx, sess.BrandID, conversions.ConversionFilter{Status: status, PartnerID: sess.PartnerID}, p)
	if err != nil {
		return nil, "", err
	}
	names, err := v.offerNames(ctx, sess.BrandID)
	out := make([]Conversion, 0, len(list))
	for _, c := range list {
		if c.PartnerID != sess.PartnerID { // the filter's index holds only its own; kept as a guard
			continue
		}
		out = append(out, Conversion{ID: c.ID, OfferID: c.OfferID, OfferName: names[c.OfferID], Status: c.Status,
			PayoutCents: c.PayoutCents, Currency: c.Currency, Sub1: c.Sub1, Sub2: c.Sub2, Sub3: c.Sub3, Sub4: c.Sub4, Sub5: c.Sub5,
			ReversalReason: c.ReversalReason, CreatedAt: c.CreatedAt})
	}
	return out, next, err
}

func (v *Views) offerNames(ctx context.Context, brandID string) (map[string]string, error) {
	names := map[string]string{}
	err := v.eachOffer(ctx, brandID, func(o offers.Listed) { names[o.ID] = o.Name })
	return names, err
}

// Payouts lists the partner's lines in the brand's payouts, newest first.
func (v *Views) Payouts(ctx context.Context, sess Session, p records.ListParams) ([]payouts.PartnerLine, string, error) {
	return v.src.Payouts.PartnerLines(ctx, sess.BrandID, sess.PartnerID, p)
}

// Postback returns the partner's postback; not found when it has none.
func (v *Views) Postback(ctx context.Context, sess Session) (tally.Postback, error) {
	return v.src.Postbacks.Postback(ctx, sess.BrandID, sess.PartnerID)
}

// SetPostback sets the partner's postback URL template and events,
// keeping the pace the brand set for it.
func (v *Views) SetPostback(ctx context.Context, sess Session, urlTemplate string, events []string) (tally.Postback, error) {
	in := endpoints.PostbackInput{URL: &urlTemplate, Events: events}
	old, err := v.src.Postbacks.Postback(ctx, sess.BrandID, sess.PartnerID)
	switch {
	case err == nil:
		in.MaxPerSecond = old.MaxPerSecond
	case tally.ErrorCode(err) != tally.ECodeNotFound:
		return tally.Postback{}, err
	}
	return v.src.Postbacks.PutPostback(ctx, sess.BrandID, sess.PartnerID, in)
}

// DeletePostback removes the partner's postback.
func (v *Views) DeletePostback(ctx context.Context, sess Session) error {
	_, err := v.src.Postbacks.DeletePostback(ctx, sess.BrandID, sess.PartnerID)
	return err
}

// TestPostback sends the partner's postback once with sample values.
func (v *Views) TestPostback(ctx context.Context, sess Session) error {
	_, err := v.src.Postbacks.SendTestPostback(ctx, sess.BrandID, sess.PartnerID)
	return err
}

// Deliveries lists the partner's postback deliveries, newest first,
// optionally only those with status.
func (v *Views) Deliveries(ctx context.Context, sess Session, status string, p records.ListParams) ([]tally.Delivery, string, error) {
	return v.src.Deliveries.Deliveries(ctx, sess.BrandID, endpoints.DeliveryFilter{Type: tally.DeliveryPostback, PartnerID: sess.PartnerID, Status: status}, p)
}

// Delivery returns one of the partner's postback deliveries; another's,
// or a webhook delivery, is not found.
func (v *Views) Delivery(ctx context.Context, sess Session, deliveryID string) (tally.Delivery, error) {
	d, err := v.src.Deliveries.Delivery(ctx, sess.BrandID, deliveryID)
	if err == nil && (d.Type != tally.DeliveryPostback || d.PartnerID != sess.PartnerID) {
		return tally.Delivery{}, records.NotFound(store.ErrNotFound, "delivery", deliveryID)
	}
	return d, err
}
