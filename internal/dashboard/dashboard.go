// Package dashboard serves Tally's web pages: the dashboard a brand's users
// sign in to at /dashboard, and the public partner application page at
// /apply/{brandId}. Pages are rendered on the server from Go templates;
// the stylesheet and icon are embedded in the binary, the charts are SVG
// drawn here, and no page loads anything from another host or needs
// JavaScript.
//
// Each page lives in a file of its own (offers.go, partners.go, …) and is
// one route in routes(); a new feature adds its file, its template and its
// line in the navigation (nav in render.go).
package dashboard

import (
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/httpapi"
)

// Dashboard is the pages' handler.
type Dashboard struct {
	svc httpapi.Services
	cfg httpapi.Config
	mux *http.ServeMux
}

// New returns the dashboard over svc. It uses cfg's Logger and its
// ApplicationRateLimit (the application page shares the API form's per-IP
// budget).
func New(svc httpapi.Services, cfg httpapi.Config) http.Handler {
	if cfg.ApplicationRateLimit == 0 {
		cfg.ApplicationRateLimit = httpapi.DefaultApplicationRateLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	d := &Dashboard{svc: svc, cfg: cfg, mux: http.NewServeMux()}
	d.routes()
	return d
}

// settingsPages are the Settings section's pages: API keys, fraud
// settings and blocked ranges, the postback token.
type settingsPages struct{ *Dashboard }

// endpointPages are the pages of the endpoints Tally delivers to (webhook
// subscriptions, a partner's postback) and of the delivery log.
type endpointPages struct{ *Dashboard }

// request is what a signed-in page works with.
type request struct {
	*http.Request
	sess  accounts.Session
	token string // the session's token, which the CSRF token derives from
}

func (r *request) brandID() string { return r.sess.BrandID }

// pageFunc serves one signed-in page; an error it returns is rendered as a
// page (404, 409, …).
type pageFunc func(w http.ResponseWriter, r *request) error

func (d *Dashboard) routes() {
	settings, endpoints := settingsPages{d}, endpointPages{d}
	d.mux.HandleFunc("GET /dashboard/assets/{file}", d.asset)
	d.mux.HandleFunc("GET /dashboard/sign-in", d.signInPage)
	d.mux.HandleFunc("POST /dashboard/sign-in", d.signIn)
	d.mux.HandleFunc("GET /apply/{brandId}", d.applyPage)
	d.mux.HandleFunc("POST /apply/{brandId}", d.apply)
	for pattern, fn := range map[string]pageFunc{
		"GET /dashboard":                                         d.overview,
		"POST /dashboard/sign-out":                               d.signOut,
		"GET /dashboard/offers":                                  d.offers,
		"GET /dashboard/offers/new":                              d.newOffer,
		"POST /dashboard/offers":                                 d.createOffer,
		"GET /dashboard/offers/{id}":                             d.offer,
		"GET /dashboard/offers/{id}/edit":                        d.editOffer,
		"POST /dashboard/offers/{id}":                            d.updateOffer,
		"GET /dashboard/partners":                                d.partners,
		"GET /dashboard/partners/{id}":                           endpoints.partner,
		"POST /dashboard/partners/{id}/{action}":                 d.partnerAction,
		"POST /dashboard/partners/{id}/postback":                 endpoints.savePostback,
		"POST /dashboard/partners/{id}/postback/recover":         endpoints.recoverPostback,
		"POST /dashboard/partners/{id}/postback/{action}":        endpoints.postbackAction,
		"GET /dashboard/conversions":                             d.conversions,
		"GET /dashboard/conversions/{id}":                        d.conversion,
		"POST /dashboard/conversions/{id}/{action}":              d.conversionAction,
		"GET /dashboard/conversions/{id}/reverse":                d.confirmReverse,
		"POST /dashboard/conversions/{id}/reverse":               d.reverse,
		"GET /dashboard/partners/{id}/reactivate":                d.confirmReactivate,
		"POST /dashboard/offers/{id}/terms":                      d.saveOfferTerms,
		"POST /dashboard/offers/{id}/terms/{partnerId}/delete":   d.deleteTerms,
		"POST /dashboard/partners/{id}/terms":                    d.savePartnerTerms,
		"GET /dashboard/payouts":                                 d.payouts,
		"POST /dashboard/payouts":                                d.createPayout,
		"GET /dashboard/payouts/{id}":                            d.payout,
		"POST /dashboard/payouts/{id}/paid":                      d.payPayout,
		"GET /dashboard/payouts/{id}/csv":                        d.payoutCSV,
		"GET /dashboard/clicks":                                  d.clicks,
		"GET /dashboard/clicks/{id}":                             d.click,
		"GET /dashboard/reports":                                 d.reports,
		"GET /dashboard/reports.csv":                             d.reportCSV,
		"GET /dashboard/webhooks":                                endpoints.webhooks,
		"POST /dashboard/webhooks":                               endpoints.createWebhook,
		"GET /dashboard/webhooks/{id}":                           endpoints.webhook,
		"POST /dashboard/webhooks/{id}":                          endpoints.updateWebhook,
		"POST /dashboard/webhooks/{id}/enable":                   endpoints.enableWebhook,
		"POST /dashboard/webhooks/{id}/recover":                  endpoints.recoverWebhook,
		"POST /dashboard/webhooks/{id}/test":                     endpoints.testWebhook,
		"POST /dashboard/webhooks/{id}/delete":                   endpoints.deleteWebhook,
		"GET /dashboard/activity/deliveries":                     endpoints.deliveries,
		"GET /dashboard/activity/deliveries/{id}":                endpoints.delivery,
		"POST /dashboard/activity/deliveries/{id}/retry":         endpoints.retryDelivery,
		"GET /dashboard/settings":                                func(w http.ResponseWriter, r *request) error { return redirect(w, r, "/dashboard/settings/keys", "") },
		"GET /dashboard/settings/fraud":                          settings.fraudSettings,
		"POST /dashboard/settings/fraud":                         settings.saveFraudSettings,
		"POST /dashboard/settings/fraud/blocked-ips":             settings.blockIP,
		"POST /dashboard/settings/fraud/blocked-ips/{id}/delete": settings.unblockIP,
		"GET /dashboard/settings/postback-token":                 settings.postbackToken,
		"POST /dashboard/settings/postback-token":                settings.createPostbackToken,
		"POST /dashboard/settings/postback-token/delete":         settings.deletePostbackToken,
		"GET /dashboard/settings/keys":                           settings.keys,
		"POST /dashboard/settings/keys":                          settings.createKey,
		"POST /dashboard/settings/keys/{id}/revoke":              settings.revokeKey,
	} {
		d.mux.Handle(pattern, d.signedIn(fn))
	}
	d.mux.HandleFunc("/", d.noPage)
}

// noPage answers a path that is no page (or asset) with the 404 page.
func (d *Dashboard) noPage(w http.ResponseWriter, r *http.Request) {
	d.errorPage(w, r, nil, tally.Errorf(tally.ECodeNotFound, "There is no page here."))
}

// ServeHTTP sets the headers every page carries and routes the request.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	// Nothing but this origin's own stylesheet and images; no framing.
	h.Set("Content-Security-Policy", "default-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if !strings.HasPrefix(r.URL.Path, "/dashboard/assets/") {
		h.Set("Cache-Control", "no-store") // pages hold the brand's data and one-time secrets
	}
	crossOrigin.Handler(d.mux).ServeHTTP(w, r)
}

// crossOrigin refuses state-changing requests that a browser says come
// from another site (Sec-Fetch-Site, Origin), before any form is read: a
// second line behind the CSRF tokens and SameSite cookies.
var crossOrigin = func() *http.CrossOriginProtection {
	c := http.NewCrossOriginProtection()
	c.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		renderStatus(w, http.StatusForbidden, "error", view{Title: "Refused", Data: errorData{
			Heading: "This request came from another site",
			Message: "Tally only accepts forms sent from its own pages. Go back, reload the page and try again.",
		}})
	}))
	return c
}()

// signedIn runs fn for a request with a live session; a request without one
// goes to the sign-in page (GET) or is refused (POST). Every POST must carry
// the session's CSRF token.
func (d *Dashboard) signedIn(fn pageFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token := sessionToken(r)
		sess, err := d.svc.Accounts.Session(r.Context(), token)
		if err != nil {
			if tally.ErrorCode(err) != tally.ECodeUnauthorized {
				d.errorPage(w, r, nil, err)
				return
			}
			if r.Method == http.MethodGet {
				http.Redirect(w, r, "/dashboard/sign-in?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			d.csrfRefused(w, r)
			return
		}
		req := &request{Request: r, sess: sess, token: token}
		if r.Method == http.MethodPost && !validCSRF(r, csrfToken(token)) {
			d.csrfRefused(w, r)
			return
		}
		if err := fn(w, req); err != nil {
			d.errorPage(w, r, req, err)
		}
	})
}

// errorPage renders an error as a page with the status the API would use.
func (d *Dashboard) errorPage(w http.ResponseWriter, r *http.Request, req *request, err error) {
	status, _ := httpapi.ErrorBody(err)
	data := errorData{Heading: http.StatusText(status), Message: tally.ErrorMessage(err)}
	switch status {
	case http.StatusNotFound:
		data.Heading = "Not found"
		data.Message = "There is nothing here, or it belongs to another brand. " + tally.ErrorMessage(err)
	case http.StatusInternalServerError:
		d.cfg.Logger.Error("dashboard: internal error", "path", r.URL.Path, "err", err.Error())
		data.Heading = "Something went wrong"
	}
	v := view{Title: data.Heading, Data: data}
	if req != nil {
		v = req.view(data.Heading, "", data)
	}
	renderStatus(w, status, "error", v)
}

// errorData is the error page's content.
type errorData struct {
	Heading, Message string
}

// isCode reports whether err is a user-facing error with one of codes.
func isCode(err error, codes ...string) bool {
	var e *tally.Error
	if !errors.As(err, &e) {
		return false
	}
	for _, c := range codes {
		if e.Code == c {
			return true
		}
	}
	return false
}
