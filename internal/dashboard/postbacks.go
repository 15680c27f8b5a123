package dashboard

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// partnerData is a partner's page: the partner, its tracking link for each
// offer, and its postback with the form that sets it.
type partnerData struct {
	tally.Partner
	Links     []trackingLink
	Postback  *tally.Postback
	Macros    []string
	Events    []string          // the events a postback may fire on
	Values    map[string]string // url, since
	Checked   []string
	Errors    map[string]string // url, events, since
	Balances  []tally.Balance
	Terms     []termRow // its own terms, by offer
	TermsForm termsForm
}

// trackingLink is an offer's link for one partner.
type trackingLink struct {
	Offer tally.Offer
	URL   string
}

func (d endpointPages) partnerData(r *request) (partnerData, error) {
	p, err := d.svc.Partners.Partner(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return partnerData{}, err
	}
	data := partnerData{Partner: p, Macros: endpoints.PostbackMacros(), Events: endpoints.PostbackEvents(),
		Values: map[string]string{}, Errors: map[string]string{}, Checked: []string{tally.EventConversionCreated}}
	pb, err := d.svc.Endpoints.Postback(r.Context(), r.Subject, p.ID)
	switch {
	case err == nil:
		data.Postback, data.Checked = &pb, pb.Events
		data.Values["url"], data.Values["since"] = pb.URL, sinceDefault(d.svc.Now(), pb.EndpointHealth)
	case !web.IsCode(err, tally.ECodeNotFound):
		return data, err
	}
	b, err := d.svc.Payouts.Balance(r.Context(), r.Subject, p.ID)
	if err != nil {
		return data, err
	}
	data.Balances = b.Data
	offers, _, err := d.svc.Offers.OffersWithTerms(r.Context(), r.Subject, records.ListParams{Limit: records.MaxLimit})
	for _, o := range offers {
		data.Links = append(data.Links, trackingLink{Offer: o.Offer, URL: web.PublicBase(r.Request) + "/c/" + o.ID + "?pid=" + p.ID})
	}
	partnerTerms(&data, offers)
	return data, err
}

func (d endpointPages) partner(w http.ResponseWriter, r *request) error {
	data, err := d.partnerData(r)
	if err != nil {
		return err
	}
	d.site.Render(w, "partner", r.View(data.Name, "partners", data))
	return nil
}

// savePostback sets the partner's postback from the form; problems show
// beside the URL or the events.
func (d endpointPages) savePostback(w http.ResponseWriter, r *request) error {
	data, err := d.partnerData(r)
	if err != nil {
		return err
	}
	u := strings.TrimSpace(r.PostFormValue("url"))
	in := endpoints.PostbackInput{URL: &u, Events: r.PostForm["events"]}
	if in.Events == nil {
		in.Events = []string{} // none ticked: refused, not the default
	}
	if _, err := d.svc.Endpoints.PutPostback(r.Context(), r.Subject, data.ID, in); err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.Errors[web.FieldOr(err, "url", "url", "events")] = postbackMessage(err)
		data.Values["url"], data.Checked = u, in.Events
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "partner", r.View(data.Name, "partners", data))
		return nil
	}
	return web.Redirect(w, r, "/dashboard/partners/"+data.ID, "postback-saved")
}

// postbackMessage says a postback error in the form's words.
func postbackMessage(err error) string {
	msg := tally.ErrorMessage(err)
	if strings.HasPrefix(msg, "events must name at least one event") {
		return "Tick at least one event."
	}
	if rest, ok := strings.CutPrefix(msg, "url"); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
		return "URL" + rest
	}
	return msg
}

// postbackAction runs one of the postback's buttons and returns to the
// partner's page with its notice.
func (d endpointPages) postbackAction(w http.ResponseWriter, r *request) error {
	id := r.PathValue("id")
	ctx, brand := r.Context(), r.Subject
	var err error
	done := "postback-" + r.PathValue("action")
	switch r.PathValue("action") {
	case "test":
		_, err = d.svc.Endpoints.SendTestPostback(ctx, brand, id)
		done = "postback-tested"
	case "enable":
		_, err = d.svc.Endpoints.EnablePostback(ctx, brand, id)
		done = "postback-enabled"
	case "delete":
		if !web.Confirmed(w, r, web.Confirmation{Active: "partners", Heading: "Delete this partner's postback?",
			Message: "The partner gets no more postbacks, pending retries included, until a new one is set.",
			Button:  "Delete the postback", Cancel: "/dashboard/partners/" + id}) {
			return nil
		}
		_, err = d.svc.Endpoints.DeletePostback(ctx, brand, id)
		done = "postback-deleted"
	default:
		return tally.Errorf(tally.ECodeNotFound, "No such action.")
	}
	if err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/partners/"+id, done)
}

// recoverPostback queues again the postback's failed deliveries since the
// form's date; a problem shows beside the date.
func (d endpointPages) recoverPostback(w http.ResponseWriter, r *request) error {
	data, err := d.partnerData(r)
	if err != nil {
		return err
	}
	if data.Postback == nil {
		return tally.Errorf(tally.ECodeNotFound, "Partner %s has no postback.", data.ID)
	}
	since := strings.TrimSpace(r.PostFormValue("since"))
	rec, err := d.svc.Deliveries.RecoverPostback(r.Context(), r.Subject, data.ID, endpoints.RecoverInput{Since: sinceOf(since)})
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation, tally.ECodeInvalidTransition) {
			return err
		}
		data.Values["since"], data.Errors["since"] = since, recoverMessage(err, d.svc.Now())
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "partner", r.View(data.Name, "partners", data))
		return nil
	}
	return web.Redirect(w, r, "/dashboard/partners/"+data.ID, recovered("postback", rec))
}
