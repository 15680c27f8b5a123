package web

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/ratelimit"
)

// Sign-in throttling: attempts per client IP and per e-mail address in
// fixed 15-minute windows, counted in the store (so across instances)
// before the password is checked, which also bounds the hashing work one
// client can cause.
const (
	signInWindow   = 15 * time.Minute
	signInsPerIP   = 30
	signInsPerUser = 10
)

// Limits counts requests against rate limits (package ratelimit).
type Limits interface {
	AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (ratelimit.Decision, error)
}

// SignIn is how a site signs people in: its sign-in page (the site's
// "sign-in" template, whose form is the template "sign-in-form") and
// form, throttled per client address and per e-mail address, and its
// sign-out.
type SignIn struct {
	Limits Limits
	// Kind names the throttle's buckets: "signin" (the dashboard's),
	// "portal-signin".
	Kind string
	// Live reports whether token is a live session's (the sign-in page
	// then goes on where the person was going).
	Live func(ctx context.Context, token string) bool
	// Check checks an e-mail address and password and starts a session,
	// returning its token; an unauthorized error is shown on the form.
	Check func(ctx context.Context, email, password string) (token string, err error)
	// End ends a session.
	End func(ctx context.Context, token string) error
	TTL time.Duration // how long a session lasts
}

// SignInData is the sign-in page's form: what was typed, where to go
// next, what went wrong, and the form's CSRF token.
type SignInData struct {
	Action, Email, Next, Error, Form string
}

// Mount adds to mux what a site serves to anyone: its assets and its
// sign-in page and form.
func (s *Site) Mount(mux *http.ServeMux, in SignIn) {
	mux.HandleFunc("GET "+s.cfg.Base+"/assets/{file}", s.Asset)
	mux.HandleFunc("GET "+s.cfg.Base+"/sign-in", s.SignInPage(in))
	mux.HandleFunc("POST "+s.cfg.Base+"/sign-in", s.SignInForm(in))
}

// SignInPage serves the site's sign-in page.
func (s *Site) SignInPage(in SignIn) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if in.Live(r.Context(), s.SessionToken(r)) {
			http.Redirect(w, r, s.Local(r.URL.Query().Get("next")), http.StatusSeeOther)
			return
		}
		s.Render(w, "sign-in", View{Title: "Sign in", Data: SignInData{Action: s.cfg.Base + "/sign-in", Next: r.URL.Query().Get("next"), Form: FormToken(w, r)}})
	}
}

// SignInForm serves the sign-in page's form: throttled, then the e-mail
// address and password checked; a session's cookie and on where the
// person was going, or the page again saying what went wrong.
func (s *Site) SignInForm(in SignIn) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !ValidFormToken(r) {
			s.FormExpired(w)
			return
		}
		email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
		data := SignInData{Action: s.cfg.Base + "/sign-in", Email: email, Next: r.PostFormValue("next"), Form: FormToken(w, r)}
		fail := func(status int, msg string) {
			data.Error = msg
			s.RenderStatus(w, status, "sign-in", View{Title: "Sign in", Data: data})
		}
		refusal, err := throttleSignIn(w, r, in, email)
		if err != nil {
			s.ErrorPage(w, r, nil, err)
			return
		}
		if refusal != "" {
			fail(http.StatusTooManyRequests, refusal)
			return
		}
		token, err := in.Check(r.Context(), email, r.PostFormValue("password"))
		if err != nil {
			if tally.ErrorCode(err) == tally.ECodeUnauthorized {
				fail(http.StatusUnauthorized, tally.ErrorMessage(err))
				return
			}
			s.ErrorPage(w, r, nil, err)
			return
		}
		// A fresh token at every sign-in: a token planted before it is useless.
		s.SetSession(w, r, token, int(in.TTL.Seconds()))
		http.Redirect(w, r, s.Local(data.Next), http.StatusSeeOther)
	}
}

// SignOut ends the request's session and goes to the sign-in page.
func (s *Site) SignOut(in SignIn) PageFunc {
	return func(w http.ResponseWriter, r *Request) error {
		if err := in.End(r.Context(), r.Token); err != nil {
			return err
		}
		s.SetSession(w, r.Request, "", -1)
		http.Redirect(w, r.Request, s.cfg.Base+"/sign-in", http.StatusSeeOther)
		return nil
	}
}

// Wait counts an attempt from r's client address (and, when email is
// given, for that address) against the sign-in budgets, in buckets named
// from Kind, and says how long to wait when either is spent (0: go on).
// Forms that take a secret link's password (invitations, resets) count
// against the same client budget: the same guessing, the same hashing.
func (in SignIn) Wait(r *http.Request, email string) (time.Duration, error) {
	limits := []struct {
		bucket string
		n      int
	}{{in.Kind + "-ip:" + httpapi.ClientIP(r), signInsPerIP}, {in.Kind + "-email:" + email, signInsPerUser}}
	if email == "" {
		limits = limits[:1]
	}
	for _, limit := range limits {
		dec, err := in.Limits.AllowPer(r.Context(), limit.bucket, limit.n, signInWindow)
		if err != nil {
			return 0, err
		}
		if !dec.Allowed {
			return dec.Wait, nil
		}
	}
	return 0, nil
}

// throttleSignIn counts a sign-in attempt (Wait). When a budget is spent
// it sets Retry-After and returns the message to show instead of checking
// the password; else "".
func throttleSignIn(w http.ResponseWriter, r *http.Request, in SignIn, email string) (string, error) {
	wait, err := in.Wait(r, email)
	if err != nil || wait <= 0 {
		return "", err
	}
	w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
	return fmt.Sprintf("Too many sign-in attempts. Try again in %d minutes.", int(math.Ceil(wait.Minutes()))), nil
}
