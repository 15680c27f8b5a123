package web

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
)

// Protect sets the headers every page carries and refuses state-changing
// requests that a browser says come from another site (Sec-Fetch-Site,
// Origin) before any form is read: a second line behind the CSRF tokens
// and SameSite cookies.
func (s *Site) Protect(h http.Handler) http.Handler {
	h = s.crossOrigin.Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		// Nothing but this origin's own stylesheet and images; no framing.
		hd.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		hd.Set("X-Frame-Options", "DENY")
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		if !strings.HasPrefix(r.URL.Path, s.cfg.Base+"/assets/") {
			hd.Set("Cache-Control", "no-store") // pages hold an account's data and one-time secrets
		}
		h.ServeHTTP(w, r)
	})
}

// Request is what a signed-in page works with.
type Request struct {
	*http.Request
	Subject string // whose data the pages show: the signed-in brand's id
	Token   string // the session's token, which the CSRF token derives from
	site    *Site
	view    View // the signed-in parts of every view
}

// View is a page's view with the signed-in parts filled in.
func (r *Request) View(title, active string, data any) View {
	v := r.view
	v.Title, v.Active, v.Data = title, active, data
	v.Flash = r.site.flash(r.URL.Query())
	return v
}

// Zone is the zone the account counts its days in: UTC unless the
// session's view says another.
func (r *Request) Zone() *time.Location { return zoneOf(r.view.Zone) }

// Today is the date in the account's zone at now.
func (r *Request) Today(now time.Time) string { return now.In(r.Zone()).Format(time.DateOnly) }

// PageFunc serves one signed-in page; an error it returns is rendered as a
// page (404, 409, …).
type PageFunc func(w http.ResponseWriter, r *Request) error

// Sessions looks up a live session by its token: whose data it opens, and
// the signed-in parts of its views (account, e-mail, navigation). An error
// with code unauthorized means there is none.
type Sessions func(ctx context.Context, token string) (subject string, v View, err error)

// SignedIn runs fn for a request with a live session; a request without
// one goes to the sign-in page (GET) or is refused (POST). Every POST must
// carry the session's CSRF token.
func (s *Site) SignedIn(sessions Sessions, fn PageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := s.SessionToken(r)
		subject, v, err := sessions(r.Context(), token)
		if err != nil {
			if tally.ErrorCode(err) != tally.ECodeUnauthorized {
				s.ErrorPage(w, r, nil, err)
				return
			}
			if r.Method == http.MethodGet {
				http.Redirect(w, r, s.cfg.Base+"/sign-in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			s.FormExpired(w)
			return
		}
		v.CSRF = CSRFToken(token)
		req := &Request{Request: r, Subject: subject, Token: token, site: s, view: v}
		if r.Method == http.MethodPost && !ValidCSRF(r, v.CSRF) {
			s.FormExpired(w)
			return
		}
		if err := fn(w, req); err != nil {
			s.ErrorPage(w, r, req, err)
		}
	})
}

// errorData is the error page's content.
type errorData struct {
	Heading, Message string
}

// ErrorPage renders an error as a page with the status the API would use;
// req, when not nil, is the signed-in request, whose navigation it keeps.
func (s *Site) ErrorPage(w http.ResponseWriter, r *http.Request, req *Request, err error) {
	status, _ := httpapi.ErrorBody(err)
	data := errorData{Heading: http.StatusText(status), Message: tally.ErrorMessage(err)}
	switch status {
	case http.StatusNotFound:
		data.Heading = "Not found"
		data.Message = "There is nothing here, or it belongs to another brand. " + tally.ErrorMessage(err)
	case http.StatusInternalServerError:
		s.cfg.Logger.Error(strings.ToLower(s.cfg.Name)+": internal error", "path", r.URL.Path, "err", err.Error())
		data.Heading = "Something went wrong"
	}
	v := View{Title: data.Heading, Data: data}
	if req != nil {
		v = req.View(data.Heading, "", data)
	}
	s.RenderStatus(w, status, "error", v)
}

// NoPage answers a path that is no page (or asset) with the 404 page.
func (s *Site) NoPage(w http.ResponseWriter, r *http.Request) {
	s.ErrorPage(w, r, nil, tally.Errorf(tally.ECodeNotFound, "There is no page here."))
}

// Refuse answers 403 with a page saying why.
func (s *Site) Refuse(w http.ResponseWriter, heading, message string) {
	s.RenderStatus(w, http.StatusForbidden, "error", View{Title: "Refused", Data: errorData{Heading: heading, Message: message}})
}

// Refuse answers a signed-in request 403 with a page saying why, in the
// site's navigation.
func (r *Request) Refuse(w http.ResponseWriter, heading, message string) {
	data := errorData{Heading: heading, Message: message}
	r.site.RenderStatus(w, http.StatusForbidden, "error", r.View("Refused", "", data))
}

// FormExpired refuses a form without its valid CSRF token.
func (s *Site) FormExpired(w http.ResponseWriter) {
	s.Refuse(w, "This form has expired",
		"The form was sent without its security token, from another site, or after you signed out. Go back, reload the page and try again.")
}

// Redirect answers a form with a redirect to a page and a notice (done, a
// key of the site's Flashes).
func Redirect(w http.ResponseWriter, r *Request, to, done string) error {
	if done != "" {
		path, fragment, hasFragment := strings.Cut(to, "#")
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		to = path + sep + "done=" + done
		if hasFragment {
			to += "#" + fragment
		}
	}
	http.Redirect(w, r.Request, to, http.StatusSeeOther)
	return nil
}

// Local keeps a redirect (after sign-in, or a form's back field) inside
// the site, so a link cannot send people elsewhere: next when it is one of
// the site's pages (other than sign-in and sign-out), else the site's home.
func (s *Site) Local(next string) string {
	base := s.cfg.Base
	if next == base || (strings.HasPrefix(next, base+"/") && !strings.ContainsAny(next, "\\\r\n") &&
		!strings.Contains(next, "/.") && !strings.HasPrefix(next, base+"/sign-")) {
		return next
	}
	return base
}

// BackTo is where a form asked to return to (its back field, a page of the
// site, without its notice), or def.
func BackTo(r *Request, def string) string {
	if b := r.PostFormValue("back"); b != "" && r.site.Local(b) == b {
		return withoutNotice(b)
	}
	return def
}

// withoutNotice is a page's address without the notice a redirect put on
// it (?done=…&n=…), so that a form returning there shows its own notice
// only.
func withoutNotice(to string) string {
	u, err := url.Parse(to)
	if err != nil {
		return to
	}
	q := u.Query()
	if !q.Has("done") && !q.Has("n") {
		return to
	}
	q.Del("done")
	q.Del("n")
	u.RawQuery = q.Encode()
	return u.String()
}

// Confirmation is the step between a button that acts at once and cannot
// be undone (ban, reject, revoke, delete) and the action itself: the
// button's form posts to the action, which answers with this page instead
// of acting; its own form posts again to the same address with confirm=yes
// and the CSRF token. It needs no JavaScript, and a form that skips it
// changes nothing.
type Confirmation struct {
	Active  string // the nav item the page belongs to
	Heading string // a question: "Ban Pat Reviews?"
	Message string // what follows, and whether it can be undone
	Button  string // the confirming button's label: "Ban the partner"
	Cancel  string // where Cancel goes: the page the button was on

	// Filled in by Confirmed.
	Action, Back string
}

// Confirmed reports whether the request carries the confirmation step's
// answer. When it does not, it renders the confirmation page, and the
// caller returns without acting. A form's back field (where to return
// after the action) is carried through, and is where Cancel goes too.
func Confirmed(w http.ResponseWriter, r *Request, c Confirmation) bool {
	if r.PostFormValue("confirm") == "yes" {
		return true
	}
	c.Action = r.URL.Path
	if b := r.PostFormValue("back"); b != "" && r.site.Local(b) == b {
		c.Back, c.Cancel = b, b
	}
	r.site.Render(w, "confirm", r.View(c.Heading, c.Active, c))
	return false
}
