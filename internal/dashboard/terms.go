package dashboard

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/web"
)

// Payout kinds, the radio buttons of a payout choice.
const (
	payoutFixed   = "fixed"
	payoutPercent = "percent"
)

// payoutChoice is a form's choice of what a conversion pays: a fixed
// amount, or a share of its revenue, with the problems of each.
type payoutChoice struct {
	ID                        string // prefixes the fields' ids
	Kind, Amount, Percent     string
	Currency                  string // the amount's; "" when it depends (the partner page)
	AmountError, PercentError string
}

// Payout messages, in the words of the marketer who fills the form.
const (
	msgAmount      = "Enter an amount such as 12.50."
	msgAmountHuge  = "Enter an amount of at most 10,000,000,000.00."
	msgAmountNone  = "Enter the amount a conversion pays, such as 12.50."
	msgPercent     = "Enter a share more than 0 and at most 100, with at most two decimals, such as 12.5."
	msgPercentNone = "Enter the share of revenue a conversion pays, such as 12.5."
	msgPayoutBoth  = "Fill in either a fixed amount or a share of revenue, not both."
)

// readPayout reads a payout choice from the form's payoutKind, payout and
// payoutPercent: the kind chosen counts, the other field is ignored; with
// no kind (a form posted without the radio buttons), exactly one of the
// two must be filled in. It returns exactly one of cents and percent, or
// the choice with its problems.
func readPayout(r *request, currency string) (payoutChoice, *int64, *json.Number) {
	c := payoutChoice{Kind: r.PostFormValue("payoutKind"), Amount: strings.TrimSpace(r.PostFormValue("payout")),
		Percent: strings.TrimSpace(r.PostFormValue("payoutPercent")), Currency: currency}
	if c.Kind != payoutFixed && c.Kind != payoutPercent {
		switch {
		case c.Amount != "" && c.Percent != "":
			c.PercentError = msgPayoutBoth
			return c, nil, nil
		case c.Percent != "":
			c.Kind = payoutPercent
		default:
			c.Kind = payoutFixed
		}
	}
	if c.Kind == payoutPercent {
		p := strings.TrimSpace(strings.TrimSuffix(c.Percent, "%"))
		switch _, err := offers.ParsePercent(json.Number(p)); {
		case p == "":
			c.PercentError = msgPercentNone
		case err != nil:
			c.PercentError = msgPercent
		default:
			n := json.Number(p)
			return c, nil, &n
		}
		return c, nil, nil
	}
	cents, ok := web.ParseMoney(c.Amount, currency)
	switch {
	case c.Amount == "":
		c.AmountError = msgAmountNone
	case !ok || cents < 0:
		c.AmountError = msgAmount
	case cents > 1_000_000_000_000:
		c.AmountError = msgAmountHuge
	default:
		return c, &cents, nil
	}
	return c, nil, nil
}

// failed reports whether the choice has a problem.
func (c payoutChoice) failed() bool { return c.AmountError != "" || c.PercentError != "" }

// termsForm sets a partner's terms on an offer: on the offer's page it
// picks the partner, on the partner's page the offer.
type termsForm struct {
	Action  string
	Pick    string // "partner" or "offer": the field the form picks
	Options []option
	Picked  string
	Error   string // the pick's problem, or the store's refusal
	Payout  payoutChoice
}

// option is one choice of a select.
type option struct{ Value, Label string }

// termRow is one partner's own terms on one offer, as a page says them.
type termRow struct {
	Offer   tally.Offer
	Partner tally.Partner
	Payout  string // the terms
	Default string // what the offer pays without them
}

// payoutText says what a fixed amount or a percentage pays.
func payoutText(cents *int64, percent *tally.Percent, currency string) string {
	if percent != nil {
		return percent.String() + "% of revenue"
	}
	if cents != nil {
		return web.Money(*cents, currency)
	}
	return ""
}

// offerPayout says what an offer pays partners without terms of their own.
func offerPayout(o tally.Offer) string {
	return payoutText(&o.PayoutCents, o.PayoutPercent, o.Currency)
}

// offerTerms fills in the offer page's terms, with partners' names, and
// the form that sets them.
func (d *Dashboard) offerTerms(r *request, data *offerData) error {
	terms, err := d.svc.Offers.AllTerms(r.Context(), r.Subject, data.ID)
	if err != nil {
		return err
	}
	dir, err := d.directory(r)
	if err != nil {
		return err
	}
	ids := make([]string, len(terms))
	for i, t := range terms {
		ids[i] = t.PartnerID
	}
	byID, err := d.withPartners(r, dir, ids)
	if err != nil {
		return err
	}
	for _, t := range terms {
		data.Terms = append(data.Terms, termRow{Offer: data.Offer, Partner: byID[t.PartnerID], Payout: payoutText(t.PayoutCents, t.PayoutPercent, data.Currency)})
	}
	data.TermsForm = termsForm{Action: "/dashboard/offers/" + data.ID + "/terms", Pick: "partner",
		Payout: payoutChoice{ID: "terms", Kind: payoutFixed, Currency: data.Currency}}
	for _, p := range dir.partners {
		if p.Status == tally.PartnerActive || p.Status == tally.PartnerApplied {
			data.TermsForm.Options = append(data.TermsForm.Options, option{p.ID, p.Name + " (" + p.Email + ")"})
		}
	}
	return nil
}

// partnerTerms fills in the partner page's terms on each offer and the
// form that sets them, from the offers it lists.
func partnerTerms(data *partnerData, list []offers.Listed) {
	data.TermsForm = termsForm{Action: "/dashboard/partners/" + data.ID + "/terms", Pick: "offer", Payout: payoutChoice{ID: "terms", Kind: payoutFixed}}
	for _, o := range list {
		data.TermsForm.Options = append(data.TermsForm.Options, option{o.ID, o.Name + " (" + o.Currency + ", pays " + offerPayout(o.Offer) + ")"})
		if t, ok := o.Terms[data.ID]; ok {
			data.Terms = append(data.Terms, termRow{Offer: o.Offer, Partner: data.Partner, Payout: payoutText(t.PayoutCents, t.PayoutPercent, o.Currency), Default: offerPayout(o.Offer)})
		}
	}
}

// putTerms sets the terms the form asks for; a problem is put on form,
// and false returned, with nothing changed.
func (d *Dashboard) putTerms(r *request, offerID, partnerID, currency string, form *termsForm) (bool, error) {
	choice, cents, percent := readPayout(r, currency)
	choice.ID = "terms"
	form.Payout = choice
	if offerID == "" || partnerID == "" {
		form.Error = "Choose the " + form.Pick + " these terms are for."
	}
	if form.Error != "" || choice.failed() {
		return false, nil
	}
	_, err := d.svc.Offers.PutTerms(r.Context(), r.Subject, offerID, partnerID, offers.TermsInput{PayoutCents: cents, PayoutPercent: percent})
	if web.IsCode(err, tally.ECodeValidation) || web.IsCode(err, tally.ECodeConflict) || web.IsCode(err, tally.ECodeNotFound) {
		form.Error = tally.ErrorMessage(err)
		return false, nil
	}
	return err == nil, err
}

// saveOfferTerms sets a partner's terms from the offer's page.
func (d *Dashboard) saveOfferTerms(w http.ResponseWriter, r *request) error {
	data, err := d.offerData(r)
	if err != nil {
		return err
	}
	partnerID := r.PostFormValue("partner")
	data.TermsForm.Picked = partnerID
	ok, err := d.putTerms(r, data.ID, partnerID, data.Currency, &data.TermsForm)
	if err != nil {
		return err
	}
	if ok {
		return web.Redirect(w, r, "/dashboard/offers/"+data.ID+"#terms", "terms-saved")
	}
	d.site.RenderStatus(w, http.StatusUnprocessableEntity, "offer", r.View(data.Name, "offers", data))
	return nil
}

// savePartnerTerms sets the partner's terms on an offer from its page.
func (d *Dashboard) savePartnerTerms(w http.ResponseWriter, r *request) error {
	data, err := endpointPages{d}.partnerData(r)
	if err != nil {
		return err
	}
	offerID := r.PostFormValue("offer")
	data.TermsForm.Picked = offerID
	currency := ""
	if o, err := d.svc.Offers.Offer(r.Context(), r.Subject, offerID); err == nil {
		currency = o.Currency
	} else if offerID != "" {
		data.TermsForm.Error = tally.ErrorMessage(err)
	}
	ok, err := d.putTerms(r, offerID, data.ID, currency, &data.TermsForm)
	if err != nil {
		return err
	}
	if ok {
		return web.Redirect(w, r, "/dashboard/partners/"+data.ID+"#terms", "terms-saved")
	}
	d.site.RenderStatus(w, http.StatusUnprocessableEntity, "partner", r.View(data.Name, "partners", data))
	return nil
}

// deleteTerms removes a partner's terms on an offer, once confirmed.
func (d *Dashboard) deleteTerms(w http.ResponseWriter, r *request) error {
	o, err := d.svc.Offers.Offer(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	p, err := d.svc.Partners.Partner(r.Context(), r.Subject, r.PathValue("partnerId"))
	if err != nil {
		return err
	}
	t, err := d.svc.Offers.Terms(r.Context(), r.Subject, o.ID, p.ID)
	if err != nil {
		return err
	}
	back := "/dashboard/offers/" + o.ID + "#terms"
	if !web.Confirmed(w, r, web.Confirmation{Active: "offers", Heading: "Remove " + p.Name + "'s terms on " + o.Name + "?",
		Message: p.Name + " earns " + payoutText(t.PayoutCents, t.PayoutPercent, o.Currency) + " per conversion now; after this, the offer's " +
			offerPayout(o) + ", from its next conversion on. Conversions already recorded keep their payout.",
		Button: "Remove the terms", Cancel: back}) {
		return nil
	}
	if _, err := d.svc.Offers.DeleteTerms(r.Context(), r.Subject, o.ID, p.ID); err != nil {
		return err
	}
	return web.Redirect(w, r, web.BackTo(r, back), "terms-removed")
}
