// Package team serves the dashboard's pages of a brand's team and its
// audit log: Settings › Team (the users and their roles, invitations and
// password reset links, each link shown once), the pages those links open
// (set a password, then signed in), and Activity › Audit log. The
// dashboard mounts them (Routes behind its sign-in, Public before it) and
// renders them with its site (Templates are theirs).
package team

import (
	"context"
	"embed"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// Templates are the team pages' templates, for the dashboard's site.
//
//go:embed templates/*.html
var Templates embed.FS

// Flashes are the notices after the team pages' forms.
var Flashes = map[string]string{
	"role-changed":       "The role was changed. It applies from the user's next page on.",
	"user-removed":       "The user was removed and signed out.",
	"invitation-revoked": "The invitation was withdrawn: its link no longer works.",
	"joined":             "Welcome to the team. You are signed in.",
	"password-reset":     "Your new password is set, and you are signed in. Every other session of yours has ended.",
}

// Throttle counts an attempt of a form that checks a secret (sign-in, an
// invitation's or reset's link) from r's client, and says how long to
// wait when there were too many (0: go on).
type Throttle func(r *http.Request) (time.Duration, error)

// SettingsView is the view of a Settings page with its row of tabs.
type SettingsView func(r *web.Request, title, tab string, data any) web.View

// Pages are the team and audit log pages.
type Pages struct {
	svc      httpapi.Services
	site     *web.Site
	settings SettingsView
	throttle Throttle
}

// New returns the pages over svc, rendered by site.
func New(svc httpapi.Services, site *web.Site, settings SettingsView, throttle Throttle) *Pages {
	return &Pages{svc: svc, site: site, settings: settings, throttle: throttle}
}

// Routes are the pages behind the dashboard's sign-in.
func (p *Pages) Routes() map[string]web.PageFunc {
	return map[string]web.PageFunc{
		"GET /dashboard/settings/team":                          p.team,
		"POST /dashboard/settings/team/invitations":             p.invite,
		"POST /dashboard/settings/team/invitations/{id}/revoke": p.revokeInvitation,
		"POST /dashboard/settings/team/users/{id}/role":         p.setRole,
		"POST /dashboard/settings/team/users/{id}/remove":       p.removeUser,
		"POST /dashboard/settings/team/users/{id}/reset":        p.makeReset,
		"GET /dashboard/activity/audit":                         p.auditLog,
	}
}

// Public are the pages an invitation's or a reset's link opens
// (/dashboard/invite/{token}, /dashboard/reset/{token}), for people not
// signed in.
func (p *Pages) Public() map[string]http.HandlerFunc {
	routes := map[string]http.HandlerFunc{}
	for path, l := range p.linkPages() {
		routes["GET /dashboard/"+path+"/{token}"] = p.showLink(l)
		routes["POST /dashboard/"+path+"/{token}"] = p.submitLink(l)
	}
	return routes
}

// shownLink is a link made a moment ago, shown this once.
type shownLink struct {
	Email, Role, URL string
	ExpiresAt        tally.Time
}

// userRow is a user of the team; You marks the one signed in.
type userRow struct {
	tally.User
	You bool
}

type teamData struct {
	Users       []userRow
	Invitations []accounts.Invitation
	Invited     *shownLink
	Reset       *shownLink
	Values      map[string]string // the invitation form's email and role
	Errors      map[string]string
	Roles       []string
}

func (p *Pages) teamData(r *web.Request) (teamData, error) {
	users, _, err := p.svc.Accounts.Users(r.Context(), r.Subject, records.ListParams{Limit: records.MaxLimit})
	if err != nil {
		return teamData{}, err
	}
	invs, err := p.svc.Accounts.Invitations(r.Context(), r.Subject)
	if err != nil {
		return teamData{}, err
	}
	me := r.View("", "", nil).UserID
	data := teamData{Invitations: invs, Values: map[string]string{"role": tally.RoleViewer}, Roles: []string{tally.RoleOwner, tally.RoleViewer}}
	for _, u := range users {
		data.Users = append(data.Users, userRow{User: u, You: u.ID == me})
	}
	return data, nil
}

func (p *Pages) render(w http.ResponseWriter, r *web.Request, status int, data teamData) {
	p.site.RenderStatus(w, status, "team", p.settings(r, "Team", "team", data))
}

func (p *Pages) team(w http.ResponseWriter, r *web.Request) error {
	data, err := p.teamData(r)
	if err != nil {
		return err
	}
	p.render(w, r, http.StatusOK, data)
	return nil
}

func (p *Pages) invite(w http.ResponseWriter, r *web.Request) error {
	in := accounts.InvitationInput{Email: ptr(r.PostFormValue("email")), Role: ptr(r.PostFormValue("role"))}
	inv, token, err := p.svc.Accounts.Invite(r.Context(), r.Subject, r.View("", "", nil).Email, in)
	data, lerr := p.teamData(r)
	if lerr != nil {
		return lerr
	}
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation, tally.ECodeConflict) {
			return err
		}
		data.Values = map[string]string{"email": *in.Email, "role": *in.Role}
		data.Errors = fieldErrors(err, "email")
		p.render(w, r, http.StatusUnprocessableEntity, data)
		return nil
	}
	data.Invited = &shownLink{Email: inv.Email, Role: inv.Role, URL: httpapi.PublicBase(r.Request) + "/dashboard/invite/" + token, ExpiresAt: inv.ExpiresAt}
	p.render(w, r, http.StatusOK, data)
	return nil
}

// fieldErrors are an error's messages by form field: the field it names,
// or def.
func fieldErrors(err error, def string) map[string]string {
	var e *tally.Error
	if errors.As(err, &e) && e.Field != "" {
		return map[string]string{e.Field: tally.ErrorMessage(err)}
	}
	return map[string]string{def: tally.ErrorMessage(err)}
}

func ptr(s string) *string { return &s }

func (p *Pages) revokeInvitation(w http.ResponseWriter, r *web.Request) error {
	if !web.Confirmed(w, r, web.Confirmation{Active: "settings", Heading: "Withdraw this invitation?",
		Message: "Its link stops working at once. You can invite the same address again later.",
		Button:  "Withdraw the invitation", Cancel: "/dashboard/settings/team"}) {
		return nil
	}
	if _, err := p.svc.Accounts.RevokeInvitation(r.Context(), r.Subject, r.PathValue("id")); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/settings/team", "invitation-revoked")
}

func (p *Pages) setRole(w http.ResponseWriter, r *web.Request) error {
	if _, err := p.svc.Accounts.SetRole(r.Context(), r.Subject, r.PathValue("id"), r.PostFormValue("role")); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/settings/team", "role-changed")
}

func (p *Pages) removeUser(w http.ResponseWriter, r *web.Request) error {
	u, err := p.svc.Accounts.User(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	msg := u.Email + " can no longer sign in, and is signed out everywhere. To let them back, invite them again."
	if u.ID == r.View("", "", nil).UserID {
		msg = "You can no longer sign in to this brand, and you are signed out now. To come back, ask an owner to invite you again."
	}
	if !web.Confirmed(w, r, web.Confirmation{Active: "settings", Heading: "Remove " + u.Email + " from the team?",
		Message: msg, Button: "Remove the user", Cancel: "/dashboard/settings/team"}) {
		return nil
	}
	if _, err := p.svc.Accounts.RemoveUser(r.Context(), r.Subject, u.ID); err != nil {
		return err
	}
	if u.ID == r.View("", "", nil).UserID {
		return web.Redirect(w, r, "/dashboard/sign-in", "") // their session ended with them
	}
	return web.Redirect(w, r, "/dashboard/settings/team", "user-removed")
}

func (p *Pages) makeReset(w http.ResponseWriter, r *web.Request) error {
	reset, token, err := p.svc.Accounts.CreateReset(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	data, err := p.teamData(r)
	if err != nil {
		return err
	}
	data.Reset = &shownLink{Email: reset.Email, URL: httpapi.PublicBase(r.Request) + "/dashboard/reset/" + token, ExpiresAt: reset.ExpiresAt}
	p.render(w, r, http.StatusOK, data)
	return nil
}

// passwordData is the page an invitation's or a reset's link opens.
type passwordData struct {
	Title, Heading, Intro, Email, Button, Error, Form string
}

// linkPage is a page a secret link opens, which sets a password and signs
// in: find is what the page says for a live link, use sets the password
// (using the link up), done is the notice on the dashboard after.
type linkPage struct {
	find func(ctx context.Context, token string) (passwordData, error)
	use  func(ctx context.Context, token, password string) (tally.User, error)
	done string
}

func (p *Pages) linkPages() map[string]linkPage {
	acc := p.svc.Accounts
	return map[string]linkPage{
		"invite": {find: func(ctx context.Context, token string) (passwordData, error) {
			inv, err := acc.PendingInvitation(ctx, token)
			return invitationData(inv), err
		}, use: acc.AcceptInvitation, done: "joined"},
		"reset": {find: func(ctx context.Context, token string) (passwordData, error) {
			reset, err := acc.PendingReset(ctx, token)
			return passwordData{Title: "Set a new password", Heading: "Set a new password", Email: reset.Email, Button: "Set the password and sign in",
				Intro: "Choose a new password for " + reset.Email + ". Every session you have elsewhere ends when it is set."}, err
		}, use: acc.UseReset, done: "password-reset"},
	}
}

func invitationData(inv accounts.Invitation) passwordData {
	what := "see everything and change nothing"
	if inv.Role == tally.RoleOwner {
		what = "see and change everything, and manage the team"
	}
	return passwordData{Title: "Join " + inv.BrandName, Heading: "Join " + inv.BrandName + " on Tally", Email: inv.Email, Button: "Join and sign in",
		Intro: inv.InvitedBy + " invited you as " + article(inv.Role) + ": you will " + what + ". Choose a password to sign in with."}
}

func article(role string) string {
	if role == tally.RoleOwner {
		return "an owner"
	}
	return "a viewer"
}

// showLink serves a link's page: a form for the password, or 404 for a
// link that is used, withdrawn or expired.
func (p *Pages) showLink(l linkPage) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, err := l.find(r.Context(), r.PathValue("token"))
		if err != nil {
			p.linkError(w, r, err)
			return
		}
		data.Form = web.FormToken(w, r)
		p.site.Render(w, "set-password", web.View{Title: data.Title, Data: data})
	}
}

// submitLink sets the password a link's form sends and signs in; a
// password that will not do shows the form again, saying why.
func (p *Pages) submitLink(l linkPage) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !p.admitted(w, r) {
			return
		}
		token := r.PathValue("token")
		data, err := l.find(r.Context(), token)
		if err != nil {
			p.linkError(w, r, err)
			return
		}
		u, err := l.use(r.Context(), token, r.PostFormValue("password"))
		if web.IsCode(err, tally.ECodeValidation) {
			data.Form, data.Error = web.FormToken(w, r), tally.ErrorMessage(err)
			p.site.RenderStatus(w, http.StatusUnprocessableEntity, "set-password", web.View{Title: data.Title, Data: data})
			return
		}
		p.signInAs(w, r, u, err, l.done)
	}
}

// linkError answers a link that no longer works (404) with a page that
// says so and what to do, and any other error as the site does.
func (p *Pages) linkError(w http.ResponseWriter, r *http.Request, err error) {
	if !web.IsCode(err, tally.ECodeNotFound) {
		p.site.ErrorPage(w, r, nil, err)
		return
	}
	p.message(w, http.StatusNotFound, "This link no longer works", tally.ErrorMessage(err))
}

// message renders a page of a heading and a message, for people not
// signed in.
func (p *Pages) message(w http.ResponseWriter, status int, heading, msg string) {
	p.site.RenderStatus(w, status, "error", web.View{Title: heading, Data: struct{ Heading, Message string }{heading, msg}})
}

// admitted checks a link's form: its token, then the sign-in throttle
// (the password is hashed, and the link is a secret to guess).
func (p *Pages) admitted(w http.ResponseWriter, r *http.Request) bool {
	if !web.ValidFormToken(r) {
		p.site.FormExpired(w)
		return false
	}
	wait, err := p.throttle(r)
	if err != nil {
		p.site.ErrorPage(w, r, nil, err)
		return false
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		p.message(w, http.StatusTooManyRequests, "Too many attempts",
			"Too many attempts from this address. Try again in "+strconv.Itoa(int(math.Ceil(wait.Minutes())))+" minutes.")
		return false
	}
	return true
}

// signInAs starts a session for u after its password was set, and opens
// the dashboard with the notice done.
func (p *Pages) signInAs(w http.ResponseWriter, r *http.Request, u tally.User, err error, done string) {
	if err == nil {
		var token string
		token, _, err = p.svc.Accounts.StartSession(r.Context(), u)
		if err == nil {
			p.site.SetSession(w, r, token, int(accounts.SessionTTL.Seconds()))
			http.Redirect(w, r, "/dashboard?done="+done, http.StatusSeeOther)
			return
		}
	}
	p.site.ErrorPage(w, r, nil, err)
}
