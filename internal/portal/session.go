package portal

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/web"
)

type signInData struct {
	Email, Next, Error, Form string
}

func (p *Portal) signInPage(w http.ResponseWriter, r *http.Request) {
	if _, err := p.access.Session(r.Context(), p.site.SessionToken(r)); err == nil {
		http.Redirect(w, r, p.site.Local(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	p.site.Render(w, "sign-in", web.View{Title: "Sign in", Data: signInData{Next: r.URL.Query().Get("next"), Form: web.FormToken(w, r)}})
}

// signIn checks the e-mail address and password, throttled like the
// dashboard's sign-in (in buckets of its own).
func (p *Portal) signIn(w http.ResponseWriter, r *http.Request) {
	if !web.ValidFormToken(r) {
		p.site.FormExpired(w)
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
	data := signInData{Email: email, Next: r.PostFormValue("next"), Form: web.FormToken(w, r)}
	fail := func(status int, msg string) {
		data.Error = msg
		p.site.RenderStatus(w, status, "sign-in", web.View{Title: "Sign in", Data: data})
	}
	refusal, err := web.ThrottleSignIn(w, r, p.limits, "portal-signin", email)
	if err != nil {
		p.site.ErrorPage(w, r, nil, err)
		return
	}
	if refusal != "" {
		fail(http.StatusTooManyRequests, refusal)
		return
	}
	token, _, err := p.access.SignIn(r.Context(), email, r.PostFormValue("password"))
	if err != nil {
		if tally.ErrorCode(err) == tally.ECodeUnauthorized {
			fail(http.StatusUnauthorized, tally.ErrorMessage(err))
			return
		}
		p.site.ErrorPage(w, r, nil, err)
		return
	}
	// A fresh token at every sign-in: a token planted before it is useless.
	p.site.SetSession(w, r, token, int(portalaccess.SessionTTL.Seconds()))
	http.Redirect(w, r, p.site.Local(data.Next), http.StatusSeeOther)
}

func (p *Portal) signOut(w http.ResponseWriter, r *web.Request) error {
	if err := p.access.EndSession(r.Context(), r.Token); err != nil {
		return err
	}
	p.site.SetSession(w, r.Request, "", -1)
	http.Redirect(w, r.Request, "/portal/sign-in", http.StatusSeeOther)
	return nil
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
