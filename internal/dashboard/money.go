package dashboard

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/records"
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
	c, err := d.svc.Conversions.Conversion(r.Context(), r.brandID(), r.PathValue("id"))
	if err != nil {
		return err
	}
	render(w, "confirm-form", r.view("Reverse conversion", "conversions", reverseForm(c)))
	return nil
}

func reverseForm(c tally.Conversion) confirmData {
	return confirmData{
		Title:   "Reverse conversion " + c.ID,
		Message: fmt.Sprintf("Its revenue and its payout of %s leave the reports and the partner's balance; when a payout already paid it, the next payout subtracts it. Your webhooks and the partner's postback are told. This cannot be undone.", moneyOf(c.PayoutCents, c.Currency)),
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
	c, err := d.svc.Conversions.ReverseConversion(r.Context(), r.brandID(), r.PathValue("id"), in)
	if isCode(err, tally.ECodeValidation) {
		form := reverseForm(c)
		form.Action = "/dashboard/conversions/" + r.PathValue("id") + "/reverse"
		form.Errors[fieldOr(err, "reason", "reason", "note")] = tally.ErrorMessage(err)
		renderStatus(w, http.StatusUnprocessableEntity, "confirm-form", r.view("Reverse conversion", "conversions", form))
		return nil
	}
	if err != nil {
		return err
	}
	return redirect(w, r, "/dashboard/conversions/"+c.ID, "conversion-reversed")
}

// confirmReactivate asks before reinstating a partner.
func (d *Dashboard) confirmReactivate(w http.ResponseWriter, r *request) error {
	p, err := d.svc.Partners.Partner(r.Context(), r.brandID(), r.PathValue("id"))
	if err != nil {
		return err
	}
	render(w, "confirm-form", r.view("Reactivate partner", "partners", confirmData{
		Title:   "Reactivate " + p.Name,
		Message: "The partner becomes active again: its tracking links and conversions are accepted, and the auto-ban rule counts its high-risk clicks from now on. Your webhooks are told.",
		Action:  "/dashboard/partners/" + p.ID + "/reactivate", Button: "Reactivate", Back: "/dashboard/partners/" + p.ID,
	}))
	return nil
}

// payoutsData is the Payouts page: what is owed to whom, the payouts, and
// the form that creates one.
type payoutsData struct {
	Owed    []owedRow
	Payouts []tally.Payout
	Page    page
	Values  map[string]string // currency, through
	Errors  map[string]string
}

// owedRow is one partner's balance in one currency.
type owedRow struct {
	Partner tally.Partner
	tally.Balance
}

func (d *Dashboard) payouts(w http.ResponseWriter, r *request) error {
	data, err := d.payoutsData(r)
	if err != nil {
		return err
	}
	render(w, "payouts", r.view("Payouts", "payouts", data))
	return nil
}

// payoutsData reads the balances of the brand's first partners (a page of
// them) and a page of payouts.
func (d *Dashboard) payoutsData(r *request) (payoutsData, error) {
	data := payoutsData{Values: map[string]string{"through": d.svc.Now().Format("2006-01-02")}, Errors: map[string]string{}}
	ps, _, err := d.svc.Partners.Partners(r.Context(), r.brandID(), "", records.ListParams{Limit: records.MaxLimit})
	if err != nil {
		return data, err
	}
	for _, p := range ps {
		b, err := d.svc.Payouts.Balance(r.Context(), r.brandID(), p.ID)
		if err != nil {
			return data, err
		}
		for _, x := range b.Data {
			if x.OwedCents != 0 || x.InPayoutCents != 0 || x.PendingCents != 0 {
				data.Owed = append(data.Owed, owedRow{Partner: p, Balance: x})
			}
		}
	}
	if len(data.Owed) > 0 {
		data.Values["currency"] = data.Owed[0].Currency
	}
	var next string
	data.Payouts, next, err = d.svc.Payouts.Payouts(r.Context(), r.brandID(), "", records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	data.Page = pageOf(r, next)
	return data, err
}

func (d *Dashboard) createPayout(w http.ResponseWriter, r *request) error {
	currency, through := strings.ToUpper(strings.TrimSpace(r.PostFormValue("currency"))), strings.TrimSpace(r.PostFormValue("through"))
	in := payouts.CreateInput{Currency: &currency}
	if through != "" {
		in.Through = &through
	}
	p, err := d.svc.Payouts.CreatePayout(r.Context(), r.brandID(), in)
	if isCode(err, tally.ECodeValidation) {
		data, derr := d.payoutsData(r)
		if derr != nil {
			return derr
		}
		data.Values["currency"], data.Values["through"] = currency, through
		data.Errors[fieldOr(err, "currency", "currency", "through")] = tally.ErrorMessage(err)
		renderStatus(w, http.StatusUnprocessableEntity, "payouts", r.view("Payouts", "payouts", data))
		return nil
	}
	if err != nil {
		return err
	}
	return redirect(w, r, "/dashboard/payouts/"+p.ID, "payout-created")
}

// payoutLine is a payout's line with its partner.
type payoutLine struct {
	tally.PayoutLine
	Partner tally.Partner
}

func (d *Dashboard) payout(w http.ResponseWriter, r *request) error {
	p, err := d.svc.Payouts.Payout(r.Context(), r.brandID(), r.PathValue("id"))
	if err != nil {
		return err
	}
	lines := make([]payoutLine, 0, len(p.Lines))
	for _, l := range p.Lines {
		partner, err := d.svc.Partners.Partner(r.Context(), r.brandID(), l.PartnerID)
		if err != nil {
			return err
		}
		lines = append(lines, payoutLine{PayoutLine: l, Partner: partner})
	}
	render(w, "payout", r.view("Payout", "payouts", struct {
		tally.Payout
		Rows []payoutLine
	}{p, lines}))
	return nil
}

func (d *Dashboard) payPayout(w http.ResponseWriter, r *request) error {
	p, err := d.svc.Payouts.MarkPaid(r.Context(), r.brandID(), r.PathValue("id"))
	if err != nil {
		return err
	}
	return redirect(w, r, "/dashboard/payouts/"+p.ID, "payout-paid")
}

// payoutCSV downloads a payout's lines as the API's CSV.
func (d *Dashboard) payoutCSV(w http.ResponseWriter, r *request) error {
	p, err := d.svc.Payouts.Payout(r.Context(), r.brandID(), r.PathValue("id"))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := d.svc.Payouts.WriteCSV(r.Context(), &buf, p); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="tally-payout-%s.csv"`, p.ID))
	_, _ = w.Write(buf.Bytes()) // the client went away; nothing left to tell it
	return nil
}
