// Package portal serves the partner portal at /portal: the pages a brand's
// partner signs in to, with its own numbers, tracking links, conversions,
// payouts and postback. It is a site of package web (layout, sessions,
// CSRF, headers, confirmation step), and reads through
// portalaccess.Views, which narrow the brand's services to the signed-in
// partner: the partner and brand come from the session, never from the
// request, and nothing a page shows has revenue in it.
package portal

import (
	"context"
	"embed"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/web"
)

//go:embed templates/*.html
var templates embed.FS

// Portal is the pages' handler.
type Portal struct {
	access *portalaccess.Service
	views  *portalaccess.Views
	limits web.Limits
	site   *web.Site
}

// sessionCookie holds a signed-in partner's session token, on /portal
// only: apart from the dashboard's.
const sessionCookie = "tally_portal"

// New returns the portal over svc. It uses cfg's Logger.
func New(svc httpapi.Services, cfg httpapi.Config) http.Handler {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Portal{
		access: svc.Portal,
		views: portalaccess.NewViews(portalaccess.Sources{Offers: svc.Offers, Reports: svc.Reports, Conversions: svc.Conversions,
			Payouts: svc.Payouts, Postbacks: svc.Endpoints, Deliveries: svc.Deliveries}),
		limits: svc.Limits,
		site: web.New(web.Config{Base: "/portal", Name: "Partner portal", Cookie: sessionCookie, Logger: cfg.Logger,
			Templates: []fs.FS{templates}, Flashes: flashes, Funcs: funcs}),
	}
	return p.site.Protect(p.routes())
}

var nav = []web.NavItem{
	{Key: "overview", Label: "Overview", Href: "/portal"},
	{Key: "links", Label: "Links", Href: "/portal/links"},
	{Key: "conversions", Label: "Conversions", Href: "/portal/conversions"},
	{Key: "payouts", Label: "Payouts", Href: "/portal/payouts"},
	{Key: "postback", Label: "Postback", Href: "/portal/postback"},
}

var funcs = template.FuncMap{
	// lastAttempt is a delivery's latest attempt, or nil.
	"lastAttempt": func(a []tally.Attempt) *tally.Attempt {
		if len(a) == 0 {
			return nil
		}
		return &a[len(a)-1]
	},
}

var flashes = map[string]string{
	"welcome":          "Your password is set. Welcome to the partner portal.",
	"postback-saved":   "Your postback is saved.",
	"postback-tested":  "A test postback is on its way; it appears below in a moment.",
	"postback-deleted": "Your postback is deleted.",
}

// session looks up a signed-in partner's session for web.Site.SignedIn.
// Its subject names the brand and the partner (subject).
func (p *Portal) session(ctx context.Context, token string) (string, web.View, error) {
	sess, err := p.access.Session(ctx, token)
	return sess.BrandID + " " + sess.PartnerID, web.View{Account: sess.PartnerName + " · " + sess.BrandName,
		AccountID: sess.PartnerID, Email: sess.Email, Nav: nav}, err
}

// partner is the session's brand and partner, from the subject session
// gave the request.
func partner(r *web.Request) portalaccess.Session {
	brandID, partnerID, _ := strings.Cut(r.Subject, " ")
	return portalaccess.Session{BrandID: brandID, PartnerID: partnerID}
}

// asPartner serves a page as its partner: the changes it makes (its
// postback) are the partner's in the brand's audit log.
func asPartner(fn web.PageFunc) web.PageFunc {
	return func(w http.ResponseWriter, r *web.Request) error {
		v := r.View("", "", nil)
		r.Request = r.WithContext(audit.WithActor(r.Context(), audit.Partner(v.AccountID, v.Email)))
		return fn(w, r)
	}
}

func (p *Portal) routes() *http.ServeMux {
	mux := http.NewServeMux()
	signIn := p.signIn()
	p.site.Mount(mux, signIn)
	mux.HandleFunc("GET /portal/invite/{token}", p.invitePage)
	mux.HandleFunc("POST /portal/invite/{token}", p.acceptInvite)
	pages := map[string]web.PageFunc{
		"GET /portal":                          p.overview,
		"POST /portal/sign-out":                p.site.SignOut(signIn),
		"GET /portal/links":                    p.links,
		"GET /portal/conversions":              p.conversions,
		"GET /portal/payouts":                  p.payouts,
		"GET /portal/postback":                 p.postback,
		"POST /portal/postback":                p.savePostback,
		"POST /portal/postback/test":           p.testPostback,
		"POST /portal/postback/delete":         p.deletePostback,
		"GET /portal/postback/deliveries/{id}": p.delivery,
	}
	for pattern, fn := range pages {
		mux.Handle(pattern, p.site.SignedIn(p.session, asPartner(fn)))
	}
	mux.HandleFunc("/", p.site.NoPage)
	return mux
}
