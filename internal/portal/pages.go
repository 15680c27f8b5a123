package portal

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

func (p *Portal) overview(w http.ResponseWriter, r *web.Request) error {
	o, err := p.views.Overview(r.Context(), partner(r))
	if err != nil {
		return err
	}
	p.site.Render(w, "overview", r.View("Overview", "overview", o))
	return nil
}

// linksData is the Links page: a link per active offer, and the sub-ID
// builder's form and the link it built.
type linksData struct {
	Links []link
	// The builder: the offer and sub-IDs asked for (a GET form, so it
	// works without JavaScript), and the link they make.
	Offer string
	Subs  [5]string
	Built string
	Error string // why the sub-IDs make no working link
}

// link is a tracking link with its full address.
type link struct {
	portalaccess.Link
	URL string
}

func (p *Portal) links(w http.ResponseWriter, r *web.Request) error {
	sess := partner(r)
	list, err := p.views.Links(r.Context(), sess)
	if err != nil {
		return err
	}
	base := httpapi.PublicBase(r.Request)
	q := r.URL.Query()
	data := linksData{Offer: q.Get("offer")}
	for i := range data.Subs {
		data.Subs[i] = strings.TrimSpace(q.Get("sub" + string(rune('1'+i))))
	}
	if err := clicks.ValidateSubs(data.Subs); err != nil {
		data.Error = tally.ErrorMessage(err)
	}
	for _, l := range list {
		data.Links = append(data.Links, link{Link: l, URL: base + l.Path})
		if l.OfferID == data.Offer && data.Error == "" {
			data.Built = base + portalaccess.TrackingPath(l.OfferID, sess.PartnerID, data.Subs)
		}
	}
	if data.Offer == "" && len(list) > 0 {
		data.Offer = list[0].OfferID
	}
	p.site.Render(w, "links", r.View("Links", "links", data))
	return nil
}

// conversionsData is the Conversions page.
type conversionsData struct {
	Rows     []portalaccess.Conversion
	Status   string
	Statuses []string
	Page     web.Page
}

func (p *Portal) conversions(w http.ResponseWriter, r *web.Request) error {
	q := r.URL.Query()
	data := conversionsData{Status: q.Get("status"),
		Statuses: []string{tally.ConversionPending, tally.ConversionApproved, tally.ConversionRejected, tally.ConversionReversed}}
	rows, next, err := p.views.Conversions(r.Context(), partner(r), data.Status, records.ListParams{Limit: 50, Cursor: q.Get("cursor")})
	if err != nil {
		return err
	}
	data.Rows, data.Page = rows, web.PageOf(r, next)
	p.site.Render(w, "conversions", r.View("Conversions", "conversions", data))
	return nil
}

// payoutsData is the Payouts page.
type payoutsData struct {
	Lines []payouts.PartnerLine
	Page  web.Page
}

func (p *Portal) payouts(w http.ResponseWriter, r *web.Request) error {
	lines, next, err := p.views.Payouts(r.Context(), partner(r), records.ListParams{Limit: 50, Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		return err
	}
	p.site.Render(w, "payouts", r.View("Payouts", "payouts", payoutsData{Lines: lines, Page: web.PageOf(r, next)}))
	return nil
}

// postbackData is the Postback page: the partner's postback, its form and
// its deliveries.
type postbackData struct {
	Postback   *tally.Postback
	Form       web.PostbackForm
	Deliveries []tally.Delivery
	Status     string
	Statuses   []string
	Page       web.Page
}

// PostbackForm is the page's form with the session's CSRF token.
func (d postbackData) PostbackForm(csrf string) web.PostbackForm {
	f := d.Form
	f.CSRF = csrf
	return f
}

func (p *Portal) postbackData(r *web.Request) (postbackData, error) {
	sess := partner(r)
	q := r.URL.Query()
	data := postbackData{Status: q.Get("status"), Statuses: []string{tally.DeliveryPending, tally.DeliverySucceeded, tally.DeliveryFailed},
		Form: web.PostbackForm{Action: "/portal/postback", Checked: []string{tally.EventConversionCreated}, Errors: map[string]string{}}}
	pb, err := p.views.Postback(r.Context(), sess)
	switch {
	case err == nil:
		data.Postback = &pb
		data.Form.Exists, data.Form.URL, data.Form.Checked = true, pb.URL, pb.Events
	case !web.IsCode(err, tally.ECodeNotFound):
		return data, err
	}
	list, next, err := p.views.Deliveries(r.Context(), sess, data.Status, records.ListParams{Limit: 20, Cursor: q.Get("cursor")})
	data.Deliveries, data.Page = list, web.PageOf(r, next)
	return data, err
}

func (p *Portal) postback(w http.ResponseWriter, r *web.Request) error {
	data, err := p.postbackData(r)
	if err != nil {
		return err
	}
	p.site.Render(w, "postback", r.View("Postback", "postback", data))
	return nil
}

// savePostback sets the partner's postback from the form; problems show
// beside the URL or the events.
func (p *Portal) savePostback(w http.ResponseWriter, r *web.Request) error {
	u := strings.TrimSpace(r.PostFormValue("url"))
	events := r.PostForm["events"]
	if events == nil {
		events = []string{} // none ticked: refused, not the default
	}
	_, err := p.views.SetPostback(r.Context(), partner(r), u, events)
	if err == nil {
		return web.Redirect(w, r, "/portal/postback", "postback-saved")
	}
	if !web.IsCode(err, tally.ECodeValidation) {
		return err
	}
	data, derr := p.postbackData(r)
	if derr != nil {
		return derr
	}
	data.Form.URL, data.Form.Checked = u, events
	data.Form.Errors[web.FieldOr(err, "url", "url", "events")] = web.PostbackMessage(err)
	p.site.RenderStatus(w, http.StatusUnprocessableEntity, "postback", r.View("Postback", "postback", data))
	return nil
}

func (p *Portal) testPostback(w http.ResponseWriter, r *web.Request) error {
	if err := p.views.TestPostback(r.Context(), partner(r)); err != nil {
		return err
	}
	return web.Redirect(w, r, "/portal/postback", "postback-tested")
}

func (p *Portal) deletePostback(w http.ResponseWriter, r *web.Request) error {
	if !web.Confirmed(w, r, web.Confirmation{Active: "postback", Heading: "Delete your postback?",
		Message: "Tally stops calling your URL, pending retries included, until you set a postback again.",
		Button:  "Delete the postback", Cancel: "/portal/postback"}) {
		return nil
	}
	if err := p.views.DeletePostback(r.Context(), partner(r)); err != nil {
		return err
	}
	return web.Redirect(w, r, "/portal/postback", "postback-deleted")
}

func (p *Portal) delivery(w http.ResponseWriter, r *web.Request) error {
	d, err := p.views.Delivery(r.Context(), partner(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	p.site.Render(w, "delivery", r.View("Postback delivery", "postback", d))
	return nil
}
