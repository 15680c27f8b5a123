package dashboard

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"net/http"
	"slices"
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

// payoutsData is the Payouts page: what is owed in each currency and to
// whom, the payouts, and the form that creates one.
type payoutsData struct {
	Totals     []tally.Balance // per currency, summed over the partners
	Owed       []owedRow       // the partners with a balance, most owed first
	More       int             // partners with a balance beyond Owed
	Currencies []string        // those someone is owed more than 0 in
	Payouts    []tally.Payout
	Page       page
	Values     map[string]string // currency, through
	Errors     map[string]string
}

// owedRow is one partner's balance in one currency.
type owedRow struct {
	Partner tally.Partner
	tally.Balance
}

// maxOwedRows bounds the partners the Payouts page lists by name.
const maxOwedRows = 100

func (d *Dashboard) payouts(w http.ResponseWriter, r *request) error {
	data, err := d.payoutsData(r)
	if err != nil {
		return err
	}
	render(w, "payouts", r.view("Payouts", "payouts", data))
	return nil
}

// payoutsData reads every partner's balance (a query per balance shard,
// not a read per partner), names the most owed, and reads a page of
// payouts.
func (d *Dashboard) payoutsData(r *request) (payoutsData, error) {
	data := payoutsData{Values: map[string]string{"through": d.svc.Now().Format("2006-01-02")}, Errors: map[string]string{}}
	balances, err := d.svc.Payouts.AllBalances(r.Context(), r.brandID())
	if err != nil {
		return data, err
	}
	totals := map[string]*tally.Balance{}
	for partnerID, bs := range balances {
		for _, b := range bs {
			if b.OwedCents == 0 && b.InPayoutCents == 0 && b.PendingCents == 0 {
				continue
			}
			data.Owed = append(data.Owed, owedRow{Partner: tally.Partner{ID: partnerID}, Balance: b})
			t := totals[b.Currency]
			if t == nil {
				t = &tally.Balance{Currency: b.Currency}
				totals[b.Currency] = t
			}
			t.PendingCents += b.PendingCents
			t.OwedCents += b.OwedCents
			t.InPayoutCents += b.InPayoutCents
			t.PaidCents += b.PaidCents
			if b.OwedCents > 0 && !slices.Contains(data.Currencies, b.Currency) {
				data.Currencies = append(data.Currencies, b.Currency)
			}
		}
	}
	for _, c := range slices.Sorted(maps.Keys(totals)) {
		data.Totals = append(data.Totals, *totals[c])
	}
	slices.Sort(data.Currencies)
	slices.SortFunc(data.Owed, func(a, b owedRow) int {
		return cmp.Or(cmp.Compare(a.Currency, b.Currency), cmp.Compare(b.OwedCents, a.OwedCents), cmp.Compare(a.Partner.ID, b.Partner.ID))
	})
	if len(data.Owed) > maxOwedRows {
		data.More, data.Owed = len(data.Owed)-maxOwedRows, data.Owed[:maxOwedRows]
	}
	if err := d.namePartners(r, data.Owed); err != nil {
		return data, err
	}
	if len(data.Currencies) > 0 {
		data.Values["currency"] = data.Currencies[0]
	}
	var next string
	data.Payouts, next, err = d.svc.Payouts.Payouts(r.Context(), r.brandID(), "", records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	data.Page = pageOf(r, next)
	return data, err
}

// namePartners fills in the partners of rows: a page of the brand's
// partners, and a read of each one not on it.
func (d *Dashboard) namePartners(r *request, rows []owedRow) error {
	if len(rows) == 0 {
		return nil
	}
	ps, _, err := d.svc.Partners.Partners(r.Context(), r.brandID(), "", records.ListParams{Limit: records.MaxLimit})
	if err != nil {
		return err
	}
	byID := map[string]tally.Partner{}
	for _, p := range ps {
		byID[p.ID] = p
	}
	for i, row := range rows {
		p, ok := byID[row.Partner.ID]
		if !ok {
			if p, err = d.svc.Partners.Partner(r.Context(), r.brandID(), row.Partner.ID); err != nil {
				return err
			}
			byID[p.ID] = p
		}
		rows[i].Partner = p
	}
	return nil
}

// payoutLabels name the payout form's fields in its messages.
var payoutLabels = map[string]string{"currency": "Currency", "through": "Approved through"}

// createPayout shows the payout the form asks for, with its lines and
// totals, and creates it once that page's form confirms (confirm=yes).
func (d *Dashboard) createPayout(w http.ResponseWriter, r *request) error {
	currency, through := strings.ToUpper(strings.TrimSpace(r.PostFormValue("currency"))), strings.TrimSpace(r.PostFormValue("through"))
	in := payouts.CreateInput{Currency: &currency}
	if through != "" {
		in.Through = &through
	}
	var p tally.Payout
	var err error
	confirming := r.PostFormValue("confirm") == "yes"
	if confirming {
		p, err = d.svc.Payouts.CreatePayout(r.Context(), r.brandID(), in)
	} else {
		p, err = d.svc.Payouts.Preview(r.Context(), r.brandID(), in)
	}
	if isCode(err, tally.ECodeValidation) {
		data, derr := d.payoutsData(r)
		if derr != nil {
			return derr
		}
		data.Values["currency"], data.Values["through"] = currency, through
		data.Errors[fieldOr(err, "currency", "currency", "through")] = tally.ErrorMessage(err)
		labelled(data.Errors, payoutLabels)
		renderStatus(w, http.StatusUnprocessableEntity, "payouts", r.view("Payouts", "payouts", data))
		return nil
	}
	if err != nil {
		return err
	}
	if confirming {
		return redirect(w, r, "/dashboard/payouts/"+p.ID, "payout-created")
	}
	rows, err := d.lines(r, p)
	if err != nil {
		return err
	}
	render(w, "payout-new", r.view("Create payout", "payouts", struct {
		tally.Payout
		Rows []payoutLine
	}{p, rows}))
	return nil
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
	lines, err := d.lines(r, p)
	if err != nil {
		return err
	}
	render(w, "payout", r.view("Payout", "payouts", struct {
		tally.Payout
		Rows []payoutLine
	}{p, lines}))
	return nil
}

// lines are p's lines with their partners.
func (d *Dashboard) lines(r *request, p tally.Payout) ([]payoutLine, error) {
	rows := make([]owedRow, len(p.Lines))
	for i, l := range p.Lines {
		rows[i].Partner.ID = l.PartnerID
	}
	if err := d.namePartners(r, rows); err != nil {
		return nil, err
	}
	lines := make([]payoutLine, len(p.Lines))
	for i, l := range p.Lines {
		lines[i] = payoutLine{PayoutLine: l, Partner: rows[i].Partner}
	}
	return lines, nil
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
