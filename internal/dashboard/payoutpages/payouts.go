// Package payoutpages serves the dashboard's payout pages: what is owed to
// whom in each currency, the payouts, creating one (its lines and total
// shown before anything is created) and marking it paid, and a payout's
// lines as CSV. The dashboard mounts them (Routes) behind its sign-in and
// renders them with its site (Templates are theirs).
package payoutpages

import (
	"bytes"
	"cmp"
	"embed"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// Templates are the payout pages' templates, for the dashboard's site.
//
//go:embed templates/*.html
var Templates embed.FS

// Flashes are the notices after the payout pages' forms.
var Flashes = map[string]string{
	"payout-created": "The payout was created. Pay its lines, then mark it paid.",
	"payout-paid":    "The payout is marked paid.",
}

// PartnersByID returns the brand's partners with ids, by id; one that no
// longer exists has only its id.
type PartnersByID func(r *web.Request, ids []string) (map[string]tally.Partner, error)

// Pages are the payout pages.
type Pages struct {
	svc      httpapi.Services
	site     *web.Site
	partners PartnersByID
}

// New returns the payout pages over svc, rendered by site, naming partners
// with partners.
func New(svc httpapi.Services, site *web.Site, partners PartnersByID) *Pages {
	return &Pages{svc: svc, site: site, partners: partners}
}

// Routes are the pages' routes, each behind the dashboard's sign-in.
func (p *Pages) Routes() map[string]web.PageFunc {
	return map[string]web.PageFunc{
		"GET /dashboard/payouts":            p.payouts,
		"POST /dashboard/payouts":           p.createPayout,
		"GET /dashboard/payouts/{id}":       p.payout,
		"POST /dashboard/payouts/{id}/paid": p.payPayout,
		"GET /dashboard/payouts/{id}/csv":   p.payoutCSV,
	}
}

// payoutsData is the Payouts page: what is owed in each currency and to
// whom, the payouts, and the form that creates one.
type payoutsData struct {
	Totals     []tally.Balance // per currency, summed over the partners
	Owed       []owedRow       // the partners with a balance, most owed first
	More       int             // partners with a balance beyond Owed
	Currencies []string        // those someone is owed more than 0 in
	Payouts    []tally.Payout
	Page       web.Page
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

func (p *Pages) payouts(w http.ResponseWriter, r *web.Request) error {
	data, err := p.payoutsData(r)
	if err != nil {
		return err
	}
	p.site.Render(w, "payouts", r.View("Payouts", "payouts", data))
	return nil
}

// payoutsData reads every partner's balance (a query per balance shard,
// not a read per partner), names the most owed, and reads a page of
// payouts.
func (p *Pages) payoutsData(r *web.Request) (payoutsData, error) {
	data := payoutsData{Values: map[string]string{"through": p.svc.Now().Format("2006-01-02")}, Errors: map[string]string{}}
	balances, err := p.svc.Payouts.AllBalances(r.Context(), r.Subject)
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
	ids := make([]string, len(data.Owed))
	for i, row := range data.Owed {
		ids[i] = row.Partner.ID
	}
	byID, err := p.partners(r, ids)
	if err != nil {
		return data, err
	}
	for i, row := range data.Owed {
		data.Owed[i].Partner = byID[row.Partner.ID]
	}
	if len(data.Currencies) > 0 {
		data.Values["currency"] = data.Currencies[0]
	}
	var next string
	data.Payouts, next, err = p.svc.Payouts.Payouts(r.Context(), r.Subject, "", records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	data.Page = web.PageOf(r, next)
	return data, err
}

// payoutLabels name the payout form's fields in its messages.
var payoutLabels = map[string]string{"currency": "Currency", "through": "Approved through"}

// createPayout shows the payout the form asks for, with its lines and
// totals, and creates it once that page's form confirms (confirm=yes).
func (p *Pages) createPayout(w http.ResponseWriter, r *web.Request) error {
	currency, through := strings.ToUpper(strings.TrimSpace(r.PostFormValue("currency"))), strings.TrimSpace(r.PostFormValue("through"))
	in := payouts.CreateInput{Currency: &currency}
	if through != "" {
		in.Through = &through
	}
	var po tally.Payout
	var err error
	confirming := r.PostFormValue("confirm") == "yes"
	if confirming {
		po, err = p.svc.Payouts.CreatePayout(r.Context(), r.Subject, in)
	} else {
		po, err = p.svc.Payouts.Preview(r.Context(), r.Subject, in)
	}
	if web.IsCode(err, tally.ECodeValidation) {
		data, derr := p.payoutsData(r)
		if derr != nil {
			return derr
		}
		data.Values["currency"], data.Values["through"] = currency, through
		data.Errors[web.FieldOr(err, "currency", "currency", "through")] = tally.ErrorMessage(err)
		web.Labelled(data.Errors, payoutLabels)
		p.site.RenderStatus(w, http.StatusUnprocessableEntity, "payouts", r.View("Payouts", "payouts", data))
		return nil
	}
	if err != nil {
		return err
	}
	if confirming {
		return web.Redirect(w, r, "/dashboard/payouts/"+po.ID, "payout-created")
	}
	return p.render(w, r, "payout-new", "Create payout", po)
}

func (p *Pages) payout(w http.ResponseWriter, r *web.Request) error {
	po, err := p.svc.Payouts.Payout(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	return p.render(w, r, "payout", "Payout", po)
}

// payoutLine is a payout's line with its partner.
type payoutLine struct {
	tally.PayoutLine
	Partner tally.Partner
}

// render renders a page of one payout, with its lines' partners.
func (p *Pages) render(w http.ResponseWriter, r *web.Request, page, title string, po tally.Payout) error {
	ids := make([]string, len(po.Lines))
	for i, l := range po.Lines {
		ids[i] = l.PartnerID
	}
	byID, err := p.partners(r, ids)
	if err != nil {
		return err
	}
	lines := make([]payoutLine, len(po.Lines))
	for i, l := range po.Lines {
		lines[i] = payoutLine{PayoutLine: l, Partner: byID[l.PartnerID]}
	}
	p.site.Render(w, page, r.View(title, "payouts", struct {
		tally.Payout
		Rows []payoutLine
	}{po, lines}))
	return nil
}

func (p *Pages) payPayout(w http.ResponseWriter, r *web.Request) error {
	po, err := p.svc.Payouts.MarkPaid(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/payouts/"+po.ID, "payout-paid")
}

// payoutCSV downloads a payout's lines as the API's CSV.
func (p *Pages) payoutCSV(w http.ResponseWriter, r *web.Request) error {
	po, err := p.svc.Payouts.Payout(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := p.svc.Payouts.WriteCSV(r.Context(), &buf, po); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="tally-payout-%s.csv"`, po.ID))
	_, _ = w.Write(buf.Bytes()) // the client went away; nothing left to tell it
	return nil
}
