package portal

import (
	"context"
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/web"
)

// signIn is how the portal signs partners in: throttled like the
// dashboard's sign-in, in buckets of its own.
func (p *Portal) signIn() web.SignIn {
	return web.SignIn{
		Limits: p.limits, Kind: "portal-signin", TTL: portalaccess.SessionTTL,
		Live: func(ctx context.Context, token string) bool {
			_, err := p.access.Session(ctx, token)
			return err == nil
		},
		Check: func(ctx context.Context, email, password string) (string, error) {
			token, _, err := p.access.SignIn(ctx, email, password)
			return token, err
		},
		End: p.access.EndSession,
	}
}

// inviteData is the invitation page: who is invited, where, and the form
// that sets the password.
type inviteData struct {
	portalaccess.Invited
	Token, Form, Error string
}

func (p *Portal) invitePage(w http.ResponseWriter, r *http.Request) {
	inv, err := p.access.Invitation(r.Context(), r.PathValue("token"))
	if err != nil {
		p.site.ErrorPage(w, r, nil, err)
		return
	}
	p.site.Render(w, "invite", web.View{Title: "Welcome", Data: inviteData{Invited: inv, Token: r.PathValue("token"), Form: web.FormToken(w, r)}})
}

// acceptInvite sets the partner's password from the invitation's form and
// signs it in. The invitation's token is its own proof: a wrong one sets
// nothing and hashes nothing, so it needs no throttle.
func (p *Portal) acceptInvite(w http.ResponseWriter, r *http.Request) {
	if !web.ValidFormToken(r) {
		p.site.FormExpired(w)
		return
	}
	token := r.PathValue("token")
	pw := r.PostFormValue("password")
	if pw != r.PostFormValue("confirm") {
		p.inviteError(w, r, "The two passwords differ: type the same password twice.")
		return
	}
	session, _, err := p.access.AcceptInvite(r.Context(), token, pw)
	switch {
	case tally.ErrorCode(err) == tally.ECodeValidation:
		p.inviteError(w, r, "Your "+tally.ErrorMessage(err)) // "password must be at least 12 characters."
		return
	case err != nil:
		p.site.ErrorPage(w, r, nil, err)
		return
	}
	p.site.SetSession(w, r, session, int(portalaccess.SessionTTL.Seconds()))
	http.Redirect(w, r, "/portal?done=welcome", http.StatusSeeOther)
}

// inviteError shows the invitation's page again with a problem of its
// form.
func (p *Portal) inviteError(w http.ResponseWriter, r *http.Request, msg string) {
	inv, err := p.access.Invitation(r.Context(), r.PathValue("token"))
	if err != nil {
		p.site.ErrorPage(w, r, nil, err)
		return
	}
	p.site.RenderStatus(w, http.StatusUnprocessableEntity, "invite", web.View{Title: "Welcome",
		Data: inviteData{Invited: inv, Token: r.PathValue("token"), Form: web.FormToken(w, r), Error: msg}})
}
