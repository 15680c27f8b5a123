package httpapi

import (
	"context"
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/offers"
)

// byOfferPartner serves a route on one partner's terms on one offer,
// /offers/{id}/partners/{partnerId}/terms.
func byOfferPartner(do func(ctx context.Context, brandID, offerID, partnerID string) (tally.PayoutTerms, error)) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		if _, err := query(r); err != nil {
			return err
		}
		v, err := do(r.Context(), p.BrandID, r.PathValue("id"), r.PathValue("partnerId"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
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
