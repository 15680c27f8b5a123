package dashboard

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/web"
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

type signInData struct {
	Email, Next, Error, Form string
}

func (d *Dashboard) signInPage(w http.ResponseWriter, r *http.Request) {
	if _, err := d.svc.Accounts.Session(r.Context(), d.site.SessionToken(r)); err == nil {
		http.Redirect(w, r, d.site.Local(r.URL.Query().Get("next")), http.StatusSeeOther)
		return
	}
	d.site.Render(w, "sign-in", web.View{Title: "Sign in", Data: signInData{Next: r.URL.Query().Get("next"), Form: web.FormToken(w, r)}})
}

func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	if !web.ValidFormToken(r) {
		d.site.FormExpired(w)
		return
	}
	email := strings.ToLower(strings.TrimSpace(r.PostFormValue("email")))
	data := signInData{Email: email, Next: r.PostFormValue("next"), Form: web.FormToken(w, r)}
	fail := func(status int, msg string) {
		data.Error = msg
		d.site.RenderStatus(w, status, "sign-in", web.View{Title: "Sign in", Data: data})
	}
	wait, err := d.throttleSignIn(r, email)
	if err != nil {
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	if wait > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
		fail(http.StatusTooManyRequests, fmt.Sprintf("Too many sign-in attempts. Try again in %d minutes.", int(math.Ceil(wait.Minutes()))))
		return
	}
	u, err := d.svc.Accounts.SignIn(r.Context(), email, r.PostFormValue("password"))
	if err != nil {
		if tally.ErrorCode(err) == tally.ECodeUnauthorized {
			fail(http.StatusUnauthorized, tally.ErrorMessage(err))
			return
		}
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	token, _, err := d.svc.Accounts.StartSession(r.Context(), u)
	if err != nil {
		d.site.ErrorPage(w, r, nil, err)
		return
	}
	// A fresh token at every sign-in: a token planted before it is useless.
	d.site.SetSession(w, r, token, int(accounts.SessionTTL.Seconds()))
	http.Redirect(w, r, d.site.Local(data.Next), http.StatusSeeOther)
}

// throttleSignIn counts a sign-in attempt from r's client (and for email,
// when given) and says how long to wait when there were too many (0: go
// on).
func (d *Dashboard) throttleSignIn(r *http.Request, email string) (time.Duration, error) {
	limits := []struct {
		bucket string
		n      int
	}{{"signin-ip:" + httpapi.ClientIP(r), signInsPerIP}, {"signin-email:" + email, signInsPerUser}}
	if email == "" {
		limits = limits[:1]
	}
	for _, limit := range limits {
		dec, err := d.svc.Limits.AllowPer(r.Context(), limit.bucket, limit.n, signInWindow)
		if err != nil || !dec.Allowed {
			return dec.Wait, err
		}
	}
	return 0, nil
}

// throttle counts an attempt of an invitation's or a reset's form against
// its client's sign-in budget: the same guessing, the same hashing.
func (d *Dashboard) throttle(r *http.Request) (time.Duration, error) { return d.throttleSignIn(r, "") }

func (d *Dashboard) signOut(w http.ResponseWriter, r *request) error {
	if err := d.svc.Accounts.EndSession(r.Context(), r.Token); err != nil {
		return err
	}
	d.site.SetSession(w, r.Request, "", -1)
	http.Redirect(w, r.Request, "/dashboard/sign-in", http.StatusSeeOther)
	return nil
}
