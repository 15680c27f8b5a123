package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/httpapi"
)

const (
	sessionCookie = "tally_session"
	// formCookie holds the CSRF token of the forms shown to people who are
	// not signed in (sign-in, application): the form must send it back
	// (double submit).
	formCookie = "tally_form"
	csrfField  = "csrf"
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

// secure reports whether the request came over https (directly, or through
// API Gateway, which says so in X-Forwarded-Proto), so cookies get Secure.
func secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

func sessionToken(r *http.Request) string {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return ""
	}
	return c.Value
}

func setSessionCookie(w http.ResponseWriter, r *http.Request, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: token, Path: "/dashboard", MaxAge: maxAge,
		HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteLaxMode,
	})
}

// csrfToken is a signed-in session's CSRF token: an HMAC of its secret
// token, so it needs no storage and cannot be made without the cookie.
func csrfToken(sessionToken string) string {
	m := hmac.New(sha256.New, []byte(sessionToken))
	m.Write([]byte("tally dashboard csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// formToken returns the CSRF token of anonymous forms, setting its cookie
// when the browser has none yet.
func formToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(formCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	token := hex.EncodeToString(raw)
	http.SetCookie(w, &http.Cookie{
		Name: formCookie, Value: token, Path: "/", HttpOnly: true, Secure: secure(r), SameSite: http.SameSiteLaxMode,
	})
	return token
}

// validCSRF reports whether the form's token equals want. It reads the
// form (at most 1 MiB).
func validCSRF(r *http.Request, want string) bool {
	r.Body = http.MaxBytesReader(nil, r.Body, httpapi.MaxBodyBytes)
	got := r.PostFormValue(csrfField)
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// validFormToken checks an anonymous form's token against its cookie.
func validFormToken(r *http.Request) bool {
	c, err := r.Cookie(formCookie)
	return err == nil && len(c.Value) == 64 && validCSRF(r, c.Value)
}

func (d *Dashboard) csrfRefused(w http.ResponseWriter, r *http.Request) {
	renderStatus(w, http.StatusForbidden, "error", view{Title: "Refused", Data: errorData{
		Heading: "This form has expired",
		Message: "The form was sent without its security token, from another site, or after you signed out. Go back, reload the page and try again.",
	}})
}

type signInData struct {
	Email, Next, Error, Form string
}

func (d *Dashboard) signInPage(w http.ResponseWriter, r *http.Request) {
	if _, err := d.svc.Accounts.Session(r.Context(), sessionToken(r)); err == nil {
		http.Redirect(w, r, localNext(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	render(w, "sign-in", view{Title: "Sign in", Data: signInData{Next: r.URL.Query().Get("next"), Form: formToken(w, r)}})
}

func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	if !validFormToken(r) {
		d.csrfRefused(w, r)
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
	data := signInData{Email: email, Next: r.PostFormValue("next"), Form: formToken(w, r)}
	fail := func(status int, msg string) {
		data.Error = msg
		renderStatus(w, status, "sign-in", view{Title: "Sign in", Data: data})
	}
	for _, limit := range []struct {
		bucket string
		n      int
	}{{"signin-ip:" + httpapi.ClientIP(r), signInsPerIP}, {"signin-email:" + email, signInsPerUser}} {
		dec, err := d.svc.Limits.AllowPer(r.Context(), limit.bucket, limit.n, signInWindow)
		if err != nil {
			d.errorPage(w, r, nil, err)
			return
		}
		if !dec.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(dec.Wait.Seconds()))))
			fail(http.StatusTooManyRequests, fmt.Sprintf("Too many sign-in attempts. Try again in %d minutes.", int(math.Ceil(dec.Wait.Minutes()))))
			return
		}
	}
	u, err := d.svc.Accounts.SignIn(r.Context(), email, r.PostFormValue("password"))
	if err != nil {
		if tally.ErrorCode(err) == tally.ECodeUnauthorized {
			fail(http.StatusUnauthorized, tally.ErrorMessage(err))
			return
		}
		d.errorPage(w, r, nil, err)
		return
	}
	token, _, err := d.svc.Accounts.StartSession(r.Context(), u)
	if err != nil {
		d.errorPage(w, r, nil, err)
		return
	}
	// A fresh token at every sign-in: a token planted before it is useless.
	setSessionCookie(w, r, token, int(accounts.SessionTTL.Seconds()))
	http.Redirect(w, r, localNext(data.Next), http.StatusSeeOther)
}

// localNext keeps a post-sign-in redirect inside the dashboard, so the
// sign-in page cannot be used to send people elsewhere.
func localNext(next string) string {
	if next == "/dashboard" || (strings.HasPrefix(next, "/dashboard/") && !strings.ContainsAny(next, "\\\r\n") &&
		!strings.Contains(next, "/.") && !strings.HasPrefix(next, "/dashboard/sign-")) {
		return next
	}
	return "/dashboard"
}

func (d *Dashboard) signOut(w http.ResponseWriter, r *request) error {
	if err := d.svc.Accounts.EndSession(r.Context(), r.token); err != nil {
		return err
	}
	setSessionCookie(w, r.Request, "", -1)
	http.Redirect(w, r.Request, "/dashboard/sign-in", http.StatusSeeOther)
	return nil
}
