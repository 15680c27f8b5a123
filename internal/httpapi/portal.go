package httpapi

import (
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
)

// PortalInvite is the answer of POST /partners/{id}/invite: the link the
// brand sends its partner, shown this once.
type PortalInvite struct {
	InviteURL string     `json:"inviteUrl"`
	ExpiresAt tally.Time `json:"expiresAt"`
}

// invitePartner makes an invitation to the partner portal for one of the
// brand's active partners.
func (a *API) invitePartner(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	inv, err := a.svc.Portal.Invite(r.Context(), p.BrandID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, PortalInvite{InviteURL: InviteURL(r, inv.Token), ExpiresAt: inv.ExpiresAt})
	return nil
}

// InviteURL is the portal's page of an invitation token on
// {public_base_url} as the request reached it.
func InviteURL(r *http.Request, token string) string {
	return PublicBase(r) + "/portal/invite/" + token
}

// Secure reports whether the request came over https (directly, or through
// API Gateway, which says so in X-Forwarded-Proto), so cookies get Secure.
func Secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// PublicBase is {public_base_url} as the request reached it.
func PublicBase(r *http.Request) string {
	scheme := "http"
	if Secure(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}
