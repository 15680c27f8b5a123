package httpapi

import (
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/tracking"
)

// The admin API lets the CLI manage brands and keys through a running local
// server, which holds the embedded store's exclusive file lock. It is mounted
// only by the local server, behind a token that only the owner of the data
// folder can read.

type brandInput struct {
	Name *string `json:"name"`
}

func (a *API) adminCreateBrand(w http.ResponseWriter, r *http.Request, _ tracking.Principal) error {
	var in brandInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Name == nil {
		return tally.Errorf(tally.ECodeValidation, "name is required.")
	}
	b, err := a.svc.CreateBrand(r.Context(), *in.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b)
	return nil
}

type keyInput struct {
	BrandID *string `json:"brandId"`
	Name    *string `json:"name"`
}

func (a *API) adminCreateKey(w http.ResponseWriter, r *http.Request, _ tracking.Principal) error {
	var in keyInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.BrandID == nil {
		return tally.Errorf(tally.ECodeValidation, "brandId is required.")
	}
	k, err := a.svc.CreateKey(r.Context(), *in.BrandID, tracking.APIKeyInput{Name: in.Name})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, k)
	return nil
}

func (a *API) adminListKeys(w http.ResponseWriter, r *http.Request, _ tracking.Principal) error {
	q, lp, err := listQuery(r, "brandId")
	if err != nil {
		return err
	}
	keys, next, err := a.svc.APIKeys(r.Context(), q.Get("brandId"), lp)
	if err != nil {
		return err
	}
	writeList(w, keys, next)
	return nil
}

func (a *API) adminRevokeKey(w http.ResponseWriter, r *http.Request, _ tracking.Principal) error {
	k, err := a.svc.RevokeAPIKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, k)
	return nil
}

func (a *API) adminCreateUser(w http.ResponseWriter, r *http.Request, _ tracking.Principal) error {
	var in tracking.UserInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	u, err := a.svc.CreateUser(r.Context(), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, u)
	return nil
}
