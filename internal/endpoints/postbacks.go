package endpoints

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/money"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Partner postbacks (DESIGN "Partner postbacks"): a partner gives a URL
// template; on the conversion events it names, Tally fills the template's
// macros with the conversion's values, query-escaped, and GETs it through
// the same delivery engine as webhooks. Revenue is never among the values:
// what the brand earns is not the partner's business.

// PostbackInput is the body of PUT /api/v1/partners/{id}/postback.
type PostbackInput struct {
	URL          *string  `json:"url"`
	Events       []string `json:"events"`
	MaxPerSecond *int     `json:"maxPerSecond"`
}

// postbackEvents are the events a postback may fire on.
var postbackEvents = []string{tally.EventConversionCreated, tally.EventConversionApproved, tally.EventConversionRejected, tally.EventConversionReversed}

// postbackMacros are the placeholders a postback URL may hold.
var postbackMacros = []string{"click_id", "conversion_id", "offer_id", "partner_id", "payout", "payout_cents",
	"currency", "status", "event", "sub1", "sub2", "sub3", "sub4", "sub5"}

// PostbackMacros and PostbackEvents list the macros a postback URL may
// hold and the events a postback may fire on, for forms that offer them.
func PostbackMacros() []string { return slices.Clone(postbackMacros) }
func PostbackEvents() []string { return slices.Clone(postbackEvents) }

// PostbackRecord is the stored postback; its health is in the item's
// attributes.
type PostbackRecord struct {
	tally.Postback
}

func (r *PostbackRecord) FromItem(it store.Item) {
	h := HealthOf(it)
	r.EndpointHealth, r.UpdatedAt = h.Public(), h.UpdatedAt(r.UpdatedAt)
}

// PostbackValues are what a postback's macros are filled with.
type PostbackValues struct {
	ClickID      string    `json:"clickId"`
	ConversionID string    `json:"conversionId"`
	OfferID      string    `json:"offerId"`
	PartnerID    string    `json:"partnerId"`
	PayoutCents  int64     `json:"payoutCents"`
	Currency     string    `json:"currency"`
	Status       string    `json:"status"`
	Subs         [5]string `json:"subs"`
}

func (v PostbackValues) macro(name, event string) string {
	switch name {
	case "click_id":
		return v.ClickID
	case "conversion_id":
		return v.ConversionID
	case "offer_id":
		return v.OfferID
	case "partner_id":
		return v.PartnerID
	case "payout":
		return money.Major(v.PayoutCents, v.Currency)
	case "payout_cents":
		return strconv.FormatInt(v.PayoutCents, 10)
	case "currency":
		return v.Currency
	case "status":
		return v.Status
	case "event":
		return event
	}
	if n, ok := strings.CutPrefix(name, "sub"); ok && len(n) == 1 && n[0] >= '1' && n[0] <= '5' {
		return v.Subs[n[0]-'1']
	}
	return ""
}

// FillPostback replaces each macro of tmpl with its value, query-escaped.
// The template was validated when it was stored.
func FillPostback(tmpl, event string, v PostbackValues) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(tmpl, '{')
		j := strings.IndexByte(tmpl[i+1:], '}')
		if i < 0 || j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		b.WriteString(url.QueryEscape(v.macro(tmpl[i+1:i+1+j], event)))
		tmpl = tmpl[i+1+j+1:]
	}
}

// checkPostbackTemplate finds the macros of tmpl, refusing unknown ones and
// macros in the scheme or host (the address is the partner's, fixed).
func checkPostbackTemplate(tmpl string) error {
	rest := tmpl
	for {
		i := strings.IndexAny(rest, "{}")
		if i < 0 {
			break
		}
		if rest[i] == '}' {
			return validate.Invalid("url: a '}' without its '{'; macros are written {name}.")
		}
		j := strings.IndexAny(rest[i+1:], "{}")
		if j < 0 || rest[i+1+j] != '}' {
			return validate.Invalid("url: a '{' without its '}'; macros are written {name}.")
		}
		if name := rest[i+1 : i+1+j]; !slices.Contains(postbackMacros, name) {
			return validate.Invalid("url: {%s} is not a macro; the macros are {%s}.", name, strings.Join(postbackMacros, "}, {"))
		}
		rest = rest[i+1+j+1:]
	}
	// What comes before the first macro must be a scheme and a whole host,
	// ended by the path or the query; otherwise a macro would be (or stand
	// in) the scheme or the host, as in "{sub1}" or "https://{sub1}.example".
	before, _, hasMacro := strings.Cut(tmpl, "{")
	if !hasMacro {
		return nil
	}
	if _, after, ok := strings.Cut(before, "://"); !ok || !strings.ContainsAny(after, "/?#") {
		return validate.Invalid("url: macros may stand in the path and query only, not in the scheme or host: the URL starts with both, such as https://partner.example/postback?click={click_id}.")
	}
	return nil
}

func (in PostbackInput) validate(checkURL func(string) error) error {
	if in.URL == nil {
		return validate.Invalid("url is required.")
	}
	if err := validate.Text("url", in.URL, true, 2048); err != nil {
		return err
	}
	if err := validate.First(checkPostbackTemplate(*in.URL), checkPace(in.MaxPerSecond)); err != nil {
		return err
	}
	// The URL as it will be sent, with every macro empty, must be one
	// receivers may have.
	if err := checkURL(FillPostback(*in.URL, "", PostbackValues{})); err != nil {
		return err
	}
	for i, name := range in.Events {
		if !slices.Contains(postbackEvents, name) {
			return validate.Invalid("events[%d]: a postback fires on %s, not %q.", i, strings.Join(postbackEvents, ", "), name)
		}
		if slices.Contains(in.Events[:i], name) {
			return validate.Invalid("events[%d]: %q is listed twice.", i, name)
		}
	}
	if in.Events != nil && len(in.Events) == 0 {
		return validate.Invalid("events must name at least one event, or be left out for conversion.created.")
	}
	return nil
}

// PutPostback sets a partner's postback, creating or replacing it. Its
// health carries over a replacement; deliveries already made keep the URL
// they were made with.
func (s *Service) PutPostback(ctx context.Context, brandID, partnerID string, in PostbackInput) (tally.Postback, error) {
	if err := in.validate(s.checkURL); err != nil {
		return tally.Postback{}, err
	}
	if _, err := s.partners.Partner(ctx, brandID, partnerID); err != nil {
		return tally.Postback{}, err
	}
	if in.Events == nil {
		in.Events = []string{tally.EventConversionCreated}
	}
	now := tally.NewTime(s.db.Now())
	for {
		key := keys.Postback(brandID, partnerID)
		it, err := s.db.Get(ctx, key)
		var op store.Op
		rec := PostbackRecord{tally.Postback{PartnerID: partnerID, BrandID: brandID, URL: *in.URL, Events: in.Events, MaxPerSecond: in.MaxPerSecond, CreatedAt: now, UpdatedAt: now}}
		switch {
		case errors.Is(err, store.ErrNotFound):
			it = newEndpointItem(key, rec)
			op = store.Put(it, store.NotExists())
		case err != nil:
			return tally.Postback{}, err
		default:
			var old PostbackRecord
			if err := records.Decode(it, &old); err != nil {
				return tally.Postback{}, err
			}
			rec.CreatedAt = old.CreatedAt
			op = replaceEndpointRecord(it, rec)
			it = op.Item
		}
		err = s.events.Transact(ctx, append([]store.Op{op, outbox.CountEndpoint(brandID)},
			audit.Record(ctx, brandID, audit.PostbackUpdated, partnerID, rec.URL+" ("+strings.Join(rec.Events, ", ")+")", now.Time)...)...)
		if _, raced := store.FailedOp(err); raced {
			continue // created, changed or deleted meanwhile: start over
		}
		if err != nil {
			return tally.Postback{}, err
		}
		rec.FromItem(it)
		return rec.Postback, nil
	}
}

// Postback returns a partner's postback.
func (s *Service) Postback(ctx context.Context, brandID, partnerID string) (tally.Postback, error) {
	rec, err := s.PostbackRecord(ctx, brandID, partnerID)
	return rec.Postback, err
}

func (s *Service) PostbackRecord(ctx context.Context, brandID, partnerID string) (PostbackRecord, error) {
	if _, err := s.partners.Partner(ctx, brandID, partnerID); err != nil {
		return PostbackRecord{}, err
	}
	rec, err := records.Get[PostbackRecord](ctx, s.db, keys.Postback(brandID, partnerID))
	if errors.Is(err, store.ErrNotFound) {
		return rec, tally.Errorf(tally.ECodeNotFound, "Partner %s has no postback.", partnerID)
	}
	return rec, err
}

// DeletePostback removes a partner's postback; its pending deliveries fail
// at their next attempt instead of being sent.
func (s *Service) DeletePostback(ctx context.Context, brandID, partnerID string) (tally.Postback, error) {
	rec, err := s.PostbackRecord(ctx, brandID, partnerID)
	if err != nil {
		return tally.Postback{}, err
	}
	err = s.events.Transact(ctx, append([]store.Op{store.Delete(keys.Postback(brandID, partnerID), store.Exists())},
		audit.Record(ctx, brandID, audit.PostbackDeleted, partnerID, rec.URL, s.db.Now())...)...)
	if _, gone := store.FailedOp(err); gone {
		return tally.Postback{}, tally.Errorf(tally.ECodeNotFound, "Partner %s has no postback.", partnerID)
	}
	return rec.Postback, err
}

// postbackTestValues fill a test postback: recognisable sample values, the
// partner's own id.
func postbackTestValues(partnerID string) PostbackValues {
	return PostbackValues{ClickID: "clk_test", ConversionID: "cnv_test", OfferID: "off_test", PartnerID: partnerID,
		PayoutCents: 123, Currency: "USD", Status: tally.ConversionApproved, Subs: [5]string{"test", "test", "test", "test", "test"}}
}

// SendTestPostback emits a postback.test event that goes to this partner's
// postback only, filled with sample values; it is delivered and logged like
// any postback.
func (s *Service) SendTestPostback(ctx context.Context, brandID, partnerID string) (tally.Event, error) {
	if _, err := s.PostbackRecord(ctx, brandID, partnerID); err != nil {
		return tally.Event{}, err
	}
	op, err := s.events.Event(brandID, tally.PostbackTestEvent, postbackTestValues(partnerID), s.db.Now())
	if err != nil {
		return tally.Event{}, err
	}
	op.Item.Attrs["partnerId"] = partnerID
	if err := s.events.Transact(ctx, op); err != nil {
		return tally.Event{}, err
	}
	var evt tally.Event
	return evt, records.Decode(op.Item, &evt)
}
