package httpapi

import (
	"bytes"
	"context"
	"fmt"
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/offers"
)

// byOfferPartner serves a route on one partner's terms on one offer,
// /offers/{id}/partners/{partnerId}/terms.
func byOfferPartner(do func(ctx context.Context, brandID, offerID, partnerID string) (tally.PayoutTerms, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		return byID(func(ctx context.Context, brandID, offerID string) (tally.PayoutTerms, error) {
			return do(ctx, brandID, offerID, r.PathValue("partnerId"))
		})(w, r, p)
	}
}

// putTerms serves PUT /offers/{id}/partners/{partnerId}/terms.
func (a *API) putTerms(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	var in offers.TermsInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	v, err := a.svc.Offers.PutTerms(r.Context(), p.BrandID, r.PathValue("id"), r.PathValue("partnerId"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

func (a *API) listPayouts(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, lp, err := listQuery(r, "status")
	if err != nil {
		return err
	}
	payouts, next, err := a.svc.Payouts.Payouts(r.Context(), p.BrandID, q.Get("status"), lp)
	if err != nil {
		return err
	}
	writeList(w, payouts, next)
	return nil
}

// payout serves GET /payouts/{id}: JSON with its lines, or with
// ?format=csv (or Accept: text/csv) the lines as CSV.
func (a *API) payout(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, err := query(r, "format")
	if err != nil {
		return err
	}
	format, err := answerFormat(r, q)
	if err != nil {
		return err
	}
	payout, err := a.svc.Payouts.Payout(r.Context(), p.BrandID, r.PathValue("id"))
	if err != nil {
		return err
	}
	if format != "csv" {
		writeJSON(w, http.StatusOK, payout)
		return nil
	}
	var buf bytes.Buffer // the names are read before the answer starts, so that a failure answers in the error shape
	if err := a.svc.Payouts.WriteCSV(r.Context(), &buf, payout); err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="tally-payout-%s.csv"`, payout.ID))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf.Bytes()) // the client went away; nothing left to tell it
	return nil
}
