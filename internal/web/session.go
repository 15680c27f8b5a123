package web

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"

	"github.com/tally-hq/tally/internal/httpapi"
)

const (
	// formCookie holds the CSRF token of the forms shown to people who are
	// not signed in (sign-in, application): the form must send it back
	// (double submit).
	formCookie = "tally_form"
	csrfField  = "csrf"
)

// Secure reports whether the request came over https (directly, or through
// API Gateway, which says so in X-Forwarded-Proto), so cookies get Secure.
func Secure(r *http.Request) bool {
	return r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https"
}

// PublicBase is {public_base_url} as the browser reached it.
func PublicBase(r *http.Request) string {
	scheme := "http"
	if Secure(r) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// SessionToken is the token in the site's session cookie, or "".
func (s *Site) SessionToken(r *http.Request) string {
	c, err := r.Cookie(s.cfg.Cookie)
	if err != nil {
		return ""
	}
	return c.Value
}

// SetSession sets the site's session cookie (Path is the site's), for
// maxAge seconds; a negative maxAge removes it.
func (s *Site) SetSession(w http.ResponseWriter, r *http.Request, token string, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: s.cfg.Cookie, Value: token, Path: s.cfg.Base, MaxAge: maxAge,
		HttpOnly: true, Secure: Secure(r), SameSite: http.SameSiteLaxMode,
	})
}

// CSRFToken is a signed-in session's CSRF token: an HMAC of its secret
// token, so it needs no storage and cannot be made without the cookie.
func CSRFToken(sessionToken string) string {
	m := hmac.New(sha256.New, []byte(sessionToken))
	m.Write([]byte("tally dashboard csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// FormToken returns the CSRF token of anonymous forms (sign-in,
// application), setting its cookie when the browser has none yet.
func FormToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(formCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	token := hex.EncodeToString(raw)
	http.SetCookie(w, &http.Cookie{
		Name: formCookie, Value: token, Path: "/", HttpOnly: true, Secure: Secure(r), SameSite: http.SameSiteLaxMode,
	})
	return token
}

// ValidCSRF reports whether the form's csrf field equals want. It reads
// the form (at most 1 MiB).
func ValidCSRF(r *http.Request, want string) bool {
	r.Body = http.MaxBytesReader(nil, r.Body, httpapi.MaxBodyBytes)
	got := r.PostFormValue(csrfField)
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// ValidFormToken checks an anonymous form's token against its cookie.
func ValidFormToken(r *http.Request) bool {
	c, err := r.Cookie(formCookie)
	return err == nil && len(c.Value) == 64 && ValidCSRF(r, c.Value)
}
