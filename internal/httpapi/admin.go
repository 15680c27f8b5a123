package httpapi

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/validate"
)

// The admin API lets the CLI manage brands and keys through a running local
// server, which holds the embedded store's exclusive file lock. It is mounted
// only by the local server, behind a token that only the owner of the data
// folder can read.

type brandInput struct {
	Name *string `json:"name"`
}

func (a *API) adminCreateBrand(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	var in brandInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.Name == nil {
		return tally.Errorf(tally.ECodeValidation, "name is required.")
	}
	b, err := a.svc.Identity.CreateBrand(r.Context(), *in.Name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, b)
	return nil
}

func (a *API) adminListBrands(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	_, lp, err := listQuery(r)
	if err != nil {
		return err
	}
	brands, next, err := a.svc.Identity.Brands(r.Context(), lp)
	if err != nil {
		return err
	}
	writeList(w, brands, next)
	return nil
}

type keyInput struct {
	BrandID *string `json:"brandId"`
	Name    *string `json:"name"`
}

func (a *API) adminCreateKey(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	var in keyInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if in.BrandID == nil {
		return tally.Errorf(tally.ECodeValidation, "brandId is required.")
	}
	k, err := a.svc.Identity.CreateKey(r.Context(), *in.BrandID, identity.APIKeyInput{Name: in.Name})
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, k)
	return nil
}

func (a *API) adminListKeys(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	q, lp, err := listQuery(r, "brandId")
	if err != nil {
		return err
	}
	keys, next, err := a.svc.Identity.APIKeys(r.Context(), q.Get("brandId"), lp)
	if err != nil {
		return err
	}
	writeList(w, keys, next)
	return nil
}

func (a *API) adminRevokeKey(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	k, err := a.svc.Identity.RevokeAPIKey(r.Context(), r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, k)
	return nil
}

func (a *API) adminCreateUser(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	var in accounts.UserInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	u, err := a.svc.Accounts.CreateUser(r.Context(), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, u)
	return nil
}

// adminResetPassword makes a password reset link for a dashboard user
// (tally users reset), at the public base URL the command was given.
func (a *API) adminResetPassword(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	var in struct {
		Email   *string `json:"email"`
		BaseURL *string `json:"baseUrl"`
	}
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	if err := validate.First(validate.Email("email", in.Email), validate.HTTPURL("baseUrl", in.BaseURL, true)); err != nil {
		return err
	}
	reset, token, err := a.svc.Accounts.CreateResetByEmail(r.Context(), *in.Email)
	if err != nil {
		return err
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, map[string]any{
		"userId": reset.UserID, "email": reset.Email, "expiresAt": reset.ExpiresAt,
		"resetUrl": strings.TrimSuffix(*in.BaseURL, "/") + "/dashboard/reset/" + token,
	})
	return nil
}
