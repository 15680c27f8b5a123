package dashboard

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/web"
)

// confirmData is a page that asks before a change that cannot be undone
// from the dashboard: a form that posts the change, so it works without
// JavaScript.
type confirmData struct {
	Title, Message, Action, Button, Back string
	// Reasons, when set, asks for a reversal's reason and note.
	Reasons []string
	Errors  map[string]string
}

// confirmReverse asks for a reversal's reason before reversing.
func (d *Dashboard) confirmReverse(w http.ResponseWriter, r *request) error {
	c, err := d.svc.Conversions.Conversion(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	d.site.Render(w, "confirm-form", r.View("Reverse conversion", "conversions", reverseForm(c)))
	return nil
}

func reverseForm(c tally.Conversion) confirmData {
	return confirmData{
		Title:   "Reverse conversion " + c.ID,
		Message: fmt.Sprintf("Its revenue and its payout of %s leave the reports and the partner's balance; when a payout already paid it, the next payout subtracts it. Your webhooks and the partner's postback are told. This cannot be undone.", web.Money(c.PayoutCents, c.Currency)),
		Action:  "/dashboard/conversions/" + c.ID + "/reverse", Button: "Reverse", Back: "/dashboard/conversions/" + c.ID,
		Reasons: []string{tally.ReversalRefund, tally.ReversalChargeback, tally.ReversalFraud, tally.ReversalOther},
		Errors:  map[string]string{},
	}
}

// reverse reverses a conversion with the reason and note of the form.
func (d *Dashboard) reverse(w http.ResponseWriter, r *request) error {
	reason, note := r.PostFormValue("reason"), strings.TrimSpace(r.PostFormValue("note"))
	in := conversions.ReversalInput{Reason: &reason}
	if note != "" {
		in.Note = &note
	}
	c, err := d.svc.Conversions.ReverseConversion(r.Context(), r.Subject, r.PathValue("id"), in)
	if web.IsCode(err, tally.ECodeValidation) {
		form := reverseForm(c)
		form.Action = "/dashboard/conversions/" + r.PathValue("id") + "/reverse"
		form.Errors[web.FieldOr(err, "reason", "reason", "note")] = tally.ErrorMessage(err)
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "confirm-form", r.View("Reverse conversion", "conversions", form))
		return nil
	}
	if err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/conversions/"+c.ID, "conversion-reversed")
}

// confirmReactivate asks before reinstating a partner.
func (d *Dashboard) confirmReactivate(w http.ResponseWriter, r *request) error {
	p, err := d.svc.Partners.Partner(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	d.site.Render(w, "confirm-form", r.View("Reactivate partner", "partners", confirmData{
		Title:   "Reactivate " + p.Name,
		Message: "The partner becomes active again: its tracking links and conversions are accepted, and the auto-ban rule counts its high-risk clicks from now on. Your webhooks are told.",
		Action:  "/dashboard/partners/" + p.ID + "/reactivate", Button: "Reactivate", Back: "/dashboard/partners/" + p.ID,
	}))
	return nil
}
