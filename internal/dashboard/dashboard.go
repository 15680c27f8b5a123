// Package dashboard serves Tally's web pages: the dashboard a brand's users
// sign in to at /dashboard, and the public partner application page at
// /apply/{brandId}. Pages are rendered on the server from Go templates;
// the stylesheet, icon and script are embedded in the binary (package
// web), the charts are SVG drawn here, and no page loads anything from
// another host or needs JavaScript: the one script adds Copy buttons
// beside values marked data-copy, which are plain text to select without
// it.
//
// The page machinery (layout, sessions, CSRF, headers, confirmation step,
// formatting) is package web's; the payout pages are a package of their
// own (payoutpages), as are Settings → General (brandsettings), the
// search (search) and the team and audit log pages (team), mounted here.
// Viewers see every page and change nothing (asUser). Each page lives in a file of its own
// (offers.go, partners.go, …) and is one route in routes(); a new feature
// adds its file, its template and its line in the navigation (nav in
// render.go).
package dashboard

import (
	"context"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/dashboard/brandsettings"
	"github.com/tally-hq/tally/internal/dashboard/payoutpages"
	"github.com/tally-hq/tally/internal/dashboard/search"
	"github.com/tally-hq/tally/internal/dashboard/team"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/tzdb"
	"github.com/tally-hq/tally/internal/web"
)

// Dashboard is the pages' handler.
type Dashboard struct {
	svc  httpapi.Services
	cfg  httpapi.Config
	site *web.Site
}

// sessionCookie holds a signed-in user's session token.
const sessionCookie = "tally_session"

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
	all := maps.Clone(flashes)
	maps.Copy(all, payoutpages.Flashes)
	maps.Copy(all, brandsettings.Flashes)
	maps.Copy(all, team.Flashes)
	d := &Dashboard{svc: svc, cfg: cfg, site: web.New(web.Config{
		Base: "/dashboard", Name: "Dashboard", Cookie: sessionCookie, Logger: cfg.Logger,
		Templates: []fs.FS{templates, payoutpages.Templates, brandsettings.Templates, search.Templates, team.Templates}, Funcs: funcs, Flashes: all,
	})}
	return d.site.Protect(d.routes())
}

// Routes lists the dashboard's signed-in pages as "METHOD /path", sorted:
// every POST among them changes something, and only owners may send it
// (but sign-out).
func Routes() []string {
	return slices.Sorted(maps.Keys((&Dashboard{}).pages()))
}

// settingsPages are the Settings section's pages: API keys, fraud
// settings and blocked ranges, the postback token.
type settingsPages struct{ *Dashboard }

// endpointPages are the pages of the endpoints Tally delivers to (webhook
// subscriptions, a partner's postback) and of the delivery log.
type endpointPages struct{ *Dashboard }

// request is what a signed-in page works with; its Subject is the brand's
// id.
type request = web.Request

// pageFunc serves one signed-in page.
type pageFunc = web.PageFunc

// session looks up a signed-in user's session for web.Site.SignedIn, and
// the brand's time zone (read each time, so a change shows at once on
// every session's next page).
func (d *Dashboard) session(ctx context.Context, token string) (string, web.View, error) {
	sess, err := d.svc.Accounts.Session(ctx, token)
	if err != nil {
		return "", web.View{}, err
	}
	b, err := d.svc.Identity.Brand(ctx, sess.BrandID)
	if err != nil {
		return "", web.View{}, err
	}
	v := web.View{Account: sess.BrandName, AccountID: sess.BrandID, Email: sess.Email, UserID: sess.UserID,
		ReadOnly: !sess.CanChange(), Nav: nav, Search: search.Path}
	if zone, err := tzdb.LoadLocation(b.Timezone); err == nil { // set from tzdb's own names
		v.Zone = zone
	}
	return sess.BrandID, v, nil
}

// signOut is the one form a viewer may send.
const signOut = "POST /dashboard/sign-out"

// asUser serves a signed-in page as its user: the changes it makes are
// theirs in the audit log, and a form that changes something is refused
// (403) to a viewer, whatever the page showed.
func asUser(pattern string, fn pageFunc) pageFunc {
	changes := strings.HasPrefix(pattern, "POST ") && pattern != signOut
	return func(w http.ResponseWriter, r *request) error {
		v := r.View("", "", nil)
		if changes && v.ReadOnly {
			r.Refuse(w, "Only an owner can do this",
				"You are a viewer of "+v.Account+": you see everything, and an owner makes the changes. Ask an owner to do it, or to make you an owner (Settings › Team).")
			return nil
		}
		r.Request = r.WithContext(audit.WithActor(r.Context(), audit.User(v.UserID, v.Email)))
		return fn(w, r)
	}
}

func (d *Dashboard) routes() *http.ServeMux {
	mux := http.NewServeMux()
	d.site.Mount(mux, d.signIn())
	mux.HandleFunc("GET /apply/{brandId}", d.applyPage)
	mux.HandleFunc("POST /apply/{brandId}", d.apply)
	for pattern, fn := range d.teamPages().Public() {
		mux.HandleFunc(pattern, fn)
	}
	for pattern, fn := range d.pages() {
		mux.Handle(pattern, d.site.SignedIn(d.session, asUser(pattern, fn)))
	}
	mux.HandleFunc("/", d.site.NoPage)
	return mux
}

func (d *Dashboard) teamPages() *team.Pages {
	return team.New(d.svc, d.site, settingsView, d.throttle)
}

// pages are the signed-in pages, by route.
func (d *Dashboard) pages() map[string]pageFunc {
	settings, endpoints := settingsPages{d}, endpointPages{d}
	pages := map[string]pageFunc{
		"GET /dashboard":                                       d.overview,
		signOut:                                                d.site.SignOut(d.signIn()),
		"GET /dashboard/offers":                                d.offers,
		"GET /dashboard/offers/new":                            d.newOffer,
		"POST /dashboard/offers":                               d.createOffer,
		"GET /dashboard/offers/{id}":                           d.offer,
		"GET /dashboard/offers/{id}/edit":                      d.editOffer,
		"POST /dashboard/offers/{id}":                          d.updateOffer,
		"GET /dashboard/partners":                              d.partners,
		"GET /dashboard/partners/{id}":                         endpoints.partner,
		"POST /dashboard/partners/{id}/{action}":               d.partnerAction,
		"POST /dashboard/partners/{id}/postback":               endpoints.savePostback,
		"POST /dashboard/partners/{id}/invite":                 endpoints.invite,
		"POST /dashboard/partners/{id}/postback/recover":       endpoints.recoverPostback,
		"POST /dashboard/partners/{id}/postback/{action}":      endpoints.postbackAction,
		"GET /dashboard/conversions":                           d.conversions,
		"GET /dashboard/conversions/{id}":                      d.conversion,
		"POST /dashboard/conversions/{id}/{action}":            d.conversionAction,
		"GET /dashboard/conversions/{id}/reverse":              d.confirmReverse,
		"POST /dashboard/conversions/{id}/reverse":             d.reverse,
		"GET /dashboard/partners/{id}/reactivate":              d.confirmReactivate,
		"POST /dashboard/offers/{id}/terms":                    d.saveOfferTerms,
		"POST /dashboard/offers/{id}/terms/{partnerId}/delete": d.deleteTerms,
		"POST /dashboard/partners/{id}/terms":                  d.savePartnerTerms,
		"GET /dashboard/clicks":                                d.clicks,
		"GET /dashboard/clicks/{id}":                           d.click,
		"GET /dashboard/reports":                               d.reports,
		"GET /dashboard/reports.csv":                           d.reportCSV,
		"GET /dashboard/webhooks":                              endpoints.webhooks,
		"POST /dashboard/webhooks":                             endpoints.createWebhook,
		"GET /dashboard/webhooks/{id}":                         endpoints.webhook,
		"POST /dashboard/webhooks/{id}":                        endpoints.updateWebhook,
		"POST /dashboard/webhooks/{id}/enable":                 endpoints.enableWebhook,
		"POST /dashboard/webhooks/{id}/recover":                endpoints.recoverWebhook,
		"POST /dashboard/webhooks/{id}/test":                   endpoints.testWebhook,
		"POST /dashboard/webhooks/{id}/delete":                 endpoints.deleteWebhook,
		"GET /dashboard/activity/deliveries":                   endpoints.deliveries,
		"GET /dashboard/activity/deliveries/{id}":              endpoints.delivery,
		"POST /dashboard/activity/deliveries/{id}/retry":       endpoints.retryDelivery,
		"GET /dashboard/settings": func(w http.ResponseWriter, r *request) error {
			return web.Redirect(w, r, "/dashboard/settings/general", "")
		},
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
	}
	maps.Copy(pages, payoutpages.New(d.svc, d.site, d.partnersByID).Routes())
	maps.Copy(pages, brandsettings.New(d.svc, d.site, settingsView).Routes())
	maps.Copy(pages, search.New(d.svc, d.site).Routes())
	maps.Copy(pages, d.teamPages().Routes())
	return pages
}
