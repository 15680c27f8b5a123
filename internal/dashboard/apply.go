package dashboard

import (
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/web"
)

// applyData is the public application page: the brand it is for, what was
// typed, and the problems beside each field.
type applyData struct {
	Brand  tally.Brand
	Values map[string]string
	Errors map[string]string
	Form   string
	Done   *tally.Partner
	Error  string
}

func (d *Dashboard) applyPage(w http.ResponseWriter, r *http.Request) {
	b, err := d.svc.Identity.Brand(r.Context(), r.PathValue("brandId"))
	if err != nil {
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	d.site.Render(w, "apply", web.View{Title: "Partner with " + b.Name, Data: applyData{Brand: b, Values: map[string]string{}, Form: web.FormToken(w, r)}})
}

func (d *Dashboard) apply(w http.ResponseWriter, r *http.Request) {
	if !web.ValidFormToken(r) {
		d.site.FormExpired(w)
		return
	}
	b, err := d.svc.Identity.Brand(r.Context(), r.PathValue("brandId"))
	if err != nil {
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	data := applyData{Brand: b, Values: map[string]string{}, Errors: map[string]string{}, Form: web.FormToken(w, r)}
	in := partners.ApplicationInput{}
	for field, target := range map[string]**string{"name": &in.Name, "email": &in.Email, "website": &in.Website, "message": &in.Message} {
		v := strings.TrimSpace(r.PostFormValue(field))
		data.Values[field] = v
		if v != "" || field == "name" || field == "email" {
			*target = &v
		}
	}
	v := web.View{Title: "Partner with " + b.Name, Data: &data}
	labels := map[string]string{"name": "Name", "email": "Email", "website": "Website", "message": "Message"}
	if data.Errors = web.Labelled(in.FieldErrors(), labels); len(data.Errors) > 0 {
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "apply", v)
		return
	}
	// The same per-IP budget as the API's application form.
	dec, err := d.svc.Limits.Allow(r.Context(), "form:"+httpapi.ClientIP(r), d.cfg.ApplicationRateLimit)
	if err != nil {
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	if !dec.Allowed {
		w.Header().Set("Retry-After", strconv.Itoa(max(int(math.Ceil(dec.Wait.Seconds())), 1)))
		data.Error = "Too many applications from your network just now. Please try again in a minute."
		d.site.RenderStatus(w, http.StatusTooManyRequests, "apply", v)
		return
	}
	p, err := d.svc.Partners.Apply(r.Context(), b.ID, in)
	if err != nil {
		if f := tally.ErrorField(err); f != "" {
			data.Errors[f] = tally.ErrorMessage(err)
			d.site.RenderStatus(w, http.StatusUnprocessableEntity, "apply", v)
			return
		}
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	data.Done = &p
	d.site.Render(w, "apply", v)
}
