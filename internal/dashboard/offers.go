package dashboard

import (
	"cmp"
	"net/http"
	"strconv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

type offersData struct {
	Offers  []tally.Offer
	Page    web.Page
	Period  web.Period
	Numbers map[string][]reportRow // by offer id, over Period
}

func (d *Dashboard) offers(w http.ResponseWriter, r *request) error {
	offers, next, err := d.svc.Offers.Offers(r.Context(), r.Subject, records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		return err
	}
	numbers, p, err := d.numbersBy(r, "offer", "/dashboard/offers")
	if err != nil {
		return err
	}
	d.site.RenderStatus(w, p.Status(), "offers", r.View("Offers", "offers", offersData{Offers: offers, Page: web.PageOf(r, next), Period: p, Numbers: numbers}))
	return nil
}

// offerForm is the offer form, to create an offer or edit one: what was
// typed, and the problems beside each field.
type offerForm struct {
	Offer      *tally.Offer // the offer edited; nil for a new one
	Values     map[string]string
	Errors     map[string]string
	Currencies []string
	CapNames   []string
	Choice     payoutChoice // a fixed payout or a share of revenue
}

// PayoutChoice is the form's payout choice with every problem of it,
// the form's own and the API's.
func (f offerForm) PayoutChoice() payoutChoice {
	c := f.Choice
	c.ID = "offer"
	c.AmountError = cmp.Or(c.AmountError, f.Errors["payoutCents"])
	c.PercentError = cmp.Or(c.PercentError, f.Errors["payoutPercent"])
	return c
}

var capNames = []string{"daily", "weekly", "monthly", "global"}

var formCurrencies = []string{"USD", "EUR", "GBP", "CAD", "AUD", "JPY", "INR", "BRL", "CHF", "SEK"}

// offerFields are the form's fields, as the API names them where it can.
var offerFields = []string{"name", "destinationUrl", "revenue", "payout", "payoutPercent", "currency", "approval", "holdHours", "status", "attributionWindowDays", "fallbackUrl", "daily", "weekly", "monthly", "global"}

// offerLabels are the form's labels, for its messages.
var offerLabels = map[string]string{"name": "Name", "destinationUrl": "Destination URL", "revenueCents": "Revenue",
	"payoutCents": "Payout", "payoutPercent": "Payout share", "currency": "Currency", "holdHours": "Hold hours", "attributionWindowDays": "Attribution window", "fallbackUrl": "Fallback URL"}

func (d *Dashboard) newOffer(w http.ResponseWriter, r *request) error {
	d.site.Render(w, "offer-form", r.View("New offer", "offers", offerForm{
		Values: map[string]string{"currency": "USD", "approval": tally.ApprovalAuto, "status": tally.OfferActive, "holdHours": "0",
			"attributionWindowDays": strconv.Itoa(tally.DefaultAttributionWindowDays)},
		Currencies: formCurrencies, CapNames: capNames, Choice: payoutChoice{Kind: payoutFixed},
	}))
	return nil
}

// readOfferForm reads the form into the input creating such an offer takes,
// and checks every field of it, so the form shows all its problems at once.
// An edited offer keeps its currency, which cannot change.
func readOfferForm(r *request, edited *tally.Offer) (offerForm, offers.OfferInput) {
	f := offerForm{Offer: edited, Values: map[string]string{}, Errors: map[string]string{}, Currencies: formCurrencies, CapNames: capNames}
	for _, k := range offerFields {
		f.Values[k] = strings.TrimSpace(r.PostFormValue(k))
	}
	v := f.Values
	if edited != nil {
		v["currency"] = edited.Currency
	}
	in := offers.OfferInput{Name: ptr(v["name"]), DestinationURL: ptr(v["destinationUrl"]), Currency: ptr(v["currency"]),
		Approval: ptr(v["approval"]), Status: ptr(v["status"]), Caps: &tally.Caps{}, FallbackURL: ptr(v["fallbackUrl"])}
	if cents, ok := web.ParseMoney(v["revenue"], v["currency"]); ok {
		in.RevenueCents = &cents
	} else if v["revenue"] != "" {
		f.Errors["revenueCents"] = msgAmount
	}
	f.Choice, in.PayoutCents, in.PayoutPercent = readPayout(r, v["currency"])
	if edited == nil {
		f.Choice.Currency = "" // the form's select picks it
	}
	if f.Choice.failed() {
		f.Errors["payoutCents"], f.Errors["payoutPercent"] = f.Choice.AmountError, f.Choice.PercentError
	}
	for field, target := range map[string]**int{"holdHours": &in.HoldHours, "attributionWindowDays": &in.AttributionWindowDays} {
		if v[field] == "" {
			continue
		}
		n, err := strconv.Atoi(v[field])
		if err != nil {
			f.Errors[field] = "Enter a whole number."
			continue
		}
		*target = &n
	}
	for name, target := range map[string]**int64{"daily": &in.Caps.Daily, "weekly": &in.Caps.Weekly, "monthly": &in.Caps.Monthly, "global": &in.Caps.Global} {
		if v[name] == "" {
			continue
		}
		n, err := strconv.ParseInt(v[name], 10, 64)
		if err != nil {
			f.Errors["caps."+name] = "Enter a whole number, or leave it empty for no cap."
			continue
		}
		*target = &n
	}
	for field, msg := range in.FieldErrors() {
		if f.Errors[field] == "" {
			f.Errors[field] = msg
		}
	}
	web.Labelled(f.Errors, offerLabels)
	return f, in
}

func (d *Dashboard) createOffer(w http.ResponseWriter, r *request) error {
	f, in := readOfferForm(r, nil)
	if len(f.Errors) > 0 {
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "offer-form", r.View("New offer", "offers", f))
		return nil
	}
	o, err := d.svc.Offers.CreateOffer(r.Context(), r.Subject, in)
	if err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/offers/"+o.ID, "offer-created")
}

func ptr[T any](v T) *T { return &v }

// offerData is an offer's page, with its tracking link and its
// partners' own terms.
type offerData struct {
	tally.Offer
	Link      string // the link with the partner's id left to fill in
	Terms     []termRow
	TermsForm termsForm
}

func (d *Dashboard) offerData(r *request) (offerData, error) {
	o, err := d.svc.Offers.Offer(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return offerData{}, err
	}
	data := offerData{Offer: o, Link: web.PublicBase(r.Request) + "/c/" + o.ID + "?pid="}
	return data, d.offerTerms(r, &data)
}

func (d *Dashboard) offer(w http.ResponseWriter, r *request) error {
	data, err := d.offerData(r)
	if err != nil {
		return err
	}
	d.site.Render(w, "offer", r.View(data.Name, "offers", data))
	return nil
}

// editOffer shows the offer form filled with the offer.
func (d *Dashboard) editOffer(w http.ResponseWriter, r *request) error {
	o, err := d.svc.Offers.Offer(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	f := offerForm{Offer: &o, Errors: map[string]string{}, Currencies: formCurrencies, CapNames: capNames, Values: map[string]string{
		"name": o.Name, "destinationUrl": o.DestinationURL, "revenue": web.MoneyIn(o.RevenueCents, o.Currency), "payout": web.MoneyIn(o.PayoutCents, o.Currency),
		"currency": o.Currency, "approval": o.Approval, "status": o.Status, "holdHours": strconv.Itoa(o.HoldHours),
		"attributionWindowDays": strconv.Itoa(o.AttributionWindowDays), "fallbackUrl": o.FallbackURL,
	}}
	f.Choice = payoutChoice{Kind: payoutFixed, Amount: f.Values["payout"], Currency: o.Currency}
	if o.PayoutPercent != nil {
		f.Choice = payoutChoice{Kind: payoutPercent, Percent: o.PayoutPercent.String(), Currency: o.Currency}
	}
	for name, limit := range map[string]*int64{"daily": o.Caps.Daily, "weekly": o.Caps.Weekly, "monthly": o.Caps.Monthly, "global": o.Caps.Global} {
		if limit != nil {
			f.Values[name] = strconv.FormatInt(*limit, 10)
		}
	}
	d.site.Render(w, "offer-form", r.View("Edit "+o.Name, "offers", f))
	return nil
}

// updateOffer saves the form as PATCH /offers/{id} would: every field of
// the form, a cap left empty removed.
func (d *Dashboard) updateOffer(w http.ResponseWriter, r *request) error {
	o, err := d.svc.Offers.Offer(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	f, in := readOfferForm(r, &o)
	if len(f.Errors) > 0 {
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "offer-form", r.View("Edit "+o.Name, "offers", f))
		return nil
	}
	patch := offers.OfferPatch{Name: in.Name, DestinationURL: in.DestinationURL, RevenueCents: in.RevenueCents, PayoutCents: in.PayoutCents,
		PayoutPercent: in.PayoutPercent, Status: in.Status, Approval: in.Approval, HoldHours: cmpOr(in.HoldHours, 0), AttributionWindowDays: in.AttributionWindowDays,
		FallbackURL: in.FallbackURL,
		Caps:        map[string]*int64{"daily": in.Caps.Daily, "weekly": in.Caps.Weekly, "monthly": in.Caps.Monthly, "global": in.Caps.Global}}
	if _, err := d.svc.Offers.UpdateOffer(r.Context(), r.Subject, o.ID, patch); err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		f.Errors[web.FieldOr(err, "name", offerFields...)] = tally.ErrorMessage(err)
		web.Labelled(f.Errors, offerLabels)
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "offer-form", r.View("Edit "+o.Name, "offers", f))
		return nil
	}
	return web.Redirect(w, r, "/dashboard/offers/"+o.ID, "offer-updated")
}

// cmpOr is p, or a pointer to def when p is nil: an empty hold means none.
func cmpOr(p *int, def int) *int {
	if p == nil {
		return &def
	}
	return p
}
