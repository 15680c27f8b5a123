package httpapi

import (
	"net/http"

	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/identity"
)

func (a *API) postbackToken(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	t, err := a.svc.Identity.PostbackToken(r.Context(), p.BrandID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// createPostbackToken makes or rotates the token; it takes no body.
func (a *API) createPostbackToken(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	t, err := a.svc.Identity.CreatePostbackToken(r.Context(), p.BrandID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, t)
	return nil
}

func (a *API) deletePostbackToken(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	t, err := a.svc.Identity.DeletePostbackToken(r.Context(), p.BrandID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, t)
	return nil
}

// postbackAnswer is the small body an advertiser's system gets back.
type postbackAnswer struct {
	ConversionID string `json:"conversionId"`
	Status       string `json:"status"`
	Duplicate    bool   `json:"duplicate"` // the txn_id was recorded before; nothing new was
}

// postback records the conversion of a click from an advertiser's GET
// postback, authorized by the brand's token (checked by guard).
func (a *API) postback(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, err := query(r, "click_id", "txn_id", "amount", "currency", "token")
	if err != nil {
		return err
	}
	c, created, err := a.svc.Conversions.RecordPostback(r.Context(), p.BrandID, conversions.InboundPostback{
		ClickID: q.Get("click_id"), TxnID: q.Get("txn_id"), Amount: q.Get("amount"), Currency: q.Get("currency"),
	})
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, postbackAnswer{ConversionID: c.ID, Status: c.Status, Duplicate: !created})
	return nil
}
