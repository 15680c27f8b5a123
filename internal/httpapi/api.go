// Package httpapi serves Tally's REST API over net/http: the management API
// under /api/v1, the public API under /api/public, and, on the local server
// only, the admin API the CLI uses. Lambda functions and the local server
// mount the same handlers.
package httpapi

import (
	"cmp"
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/trace"
)

// Config configures the API.
type Config struct {
	// RateLimit is how many requests one API key may make per minute.
	RateLimit int
	// ApplicationRateLimit is how many partner applications one client IP
	// may submit per minute.
	ApplicationRateLimit int
	// ClickRateLimit is how many clicks of one tracking link's offer from
	// one client IP are recorded per minute; the visitor past it is sent
	// on untracked.
	ClickRateLimit int
	// AdminToken enables the admin API (used by the CLI against a running
	// local server) for requests bearing it. Empty disables it.
	AdminToken string
	Logger     *slog.Logger
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// (a load balancer in front of the local server). From any other peer
	// the header is ignored: a client can write anything in it.
	TrustedProxies []netip.Prefix
	// Dashboard serves the dashboard's pages and the partner application
	// page (GroupDashboard); nil answers them 404.
	Dashboard http.Handler
	// Portal serves the partner portal's pages at /portal (GroupDashboard
	// too); nil answers them 404.
	Portal http.Handler
	// RequestAttrs, when set, adds attributes to every log line of a
	// request (a Lambda adds its invocation's ids).
	RequestAttrs func(*http.Request) []any
	// Requests, when set, is told of every request answered (metrics);
	// one that is a RequestLineObserver writes the request's line too.
	Requests RequestObserver
}

// Defaults of Config.
const (
	DefaultRateLimit            = 100
	DefaultApplicationRateLimit = 10
	DefaultClickRateLimit       = 60
)

// ConfigFromEnv reads the API's settings from the environment, with the
// defaults filled in: it is the configuration in effect.
func ConfigFromEnv(logger *slog.Logger) (Config, error) {
	cfg := Config{Logger: logger}
	var err error
	if cfg.RateLimit, err = app.PositiveInt(app.EnvRateLimit); err != nil {
		return cfg, err
	}
	if cfg.ApplicationRateLimit, err = app.PositiveInt(app.EnvApplicationRateLimit); err != nil {
		return cfg, err
	}
	if cfg.ClickRateLimit, err = app.PositiveInt(app.EnvClickRateLimit); err != nil {
		return cfg, err
	}
	cfg.RateLimit = cmp.Or(cfg.RateLimit, DefaultRateLimit)
	cfg.ApplicationRateLimit = cmp.Or(cfg.ApplicationRateLimit, DefaultApplicationRateLimit)
	cfg.ClickRateLimit = cmp.Or(cfg.ClickRateLimit, DefaultClickRateLimit)
	cfg.TrustedProxies, err = app.Prefixes(app.EnvTrustedProxies)
	return cfg, err
}

// Services are what the API's routes call. A deployment that serves some
// route groups sets what those groups use; the rest may stay nil.
type Services struct {
	Identity    *identity.Service // every route that takes a key
	Limits      Limits            // every route
	Accounts    *accounts.Service // the admin API's users
	Offers      *offers.Service
	Partners    *partners.Service
	Conversions *conversions.Service
	Reports     *reports.Service
	Clicks      *clicks.Service
	Endpoints   *endpoints.Service
	Deliveries  *endpoints.Log
	Payouts     *payouts.Service
	Portal      *portalaccess.Service // partner portal invitations (and the portal's sign-in)
	Audit       *audit.Log
	Store       StoreReader // GET /readyz
	// Now is the time, in UTC to the millisecond (records.DB.Now).
	Now func() time.Time
}

// Limits counts requests against rate limits (package ratelimit).
type Limits interface {
	Allow(ctx context.Context, bucket string, limit int) (ratelimit.Decision, error)
	AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (ratelimit.Decision, error)
}

// API holds the handlers.
type API struct {
	svc Services
	cfg Config
}

// New returns the API over svc.
func New(svc Services, cfg Config) *API {
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.ApplicationRateLimit == 0 {
		cfg.ApplicationRateLimit = DefaultApplicationRateLimit
	}
	if cfg.ClickRateLimit == 0 {
		cfg.ClickRateLimit = DefaultClickRateLimit
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &API{svc: svc, cfg: cfg}
}

// Groups of routes, so that each Lambda function mounts only its own.
const (
	GroupOffers       = "offers"
	GroupPartners     = "partners"
	GroupConversions  = "conversions"
	GroupReports      = "reports"
	GroupPayouts      = "payouts" // balances and payouts: partner money
	GroupApplications = "applications"
	GroupWebhooks     = "webhooks"
	GroupDeliveries   = "deliveries"
	GroupKeys         = "keys"
	GroupDashboard    = "dashboard"
	GroupClick        = "click" // the tracking link, the busiest route: a function of its own
	GroupFraud        = "fraud" // clicks and the fraud settings
	GroupAdmin        = "admin"
	GroupHealth       = "health" // /healthz and /readyz, for load balancers and probes
	// GroupFallback serves no route: it answers what no other function's
	// routes match (API Gateway's $default route) in the error shape, 405
	// with Allow for a known path, 404 otherwise.
	GroupFallback = "fallback"
)

// AllGroups is every group, for the local server that runs everything.
var AllGroups = []string{GroupOffers, GroupPartners, GroupConversions, GroupReports, GroupPayouts, GroupApplications, GroupWebhooks, GroupDeliveries, GroupKeys, GroupDashboard, GroupClick, GroupFraud, GroupAdmin, GroupHealth}

type route struct {
	group   string
	method  string
	pattern string
	auth    auth
	handle  handlerFunc
}

// auth says how a route authenticates.
type auth int

const (
	authKey      auth = iota // a brand's API key, rate-limited per key
	authForm                 // none; a form that writes, rate-limited per client IP at ApplicationRateLimit
	authPublic               // none; public reading, rate-limited per client IP at RateLimit
	authAdmin                // the local server's admin token
	authPages                // none here: the dashboard signs its users in and counts its forms itself
	authNone                 // none: the tracking link, scored for fraud and limited per offer and IP (ClickRateLimit) instead
	authPostback             // a brand's postback token in ?token=, rate-limited per token
)

func (a *API) routes() []route {
	return []route{
		{GroupOffers, "GET", "/api/v1/offers", authKey, listed(a.svc.Offers.Offers)},
		{GroupOffers, "POST", "/api/v1/offers", authKey, created(decodeBody, a.svc.Offers.CreateOffer)},
		{GroupOffers, "GET", "/api/v1/offers/{id}", authKey, byID(a.svc.Offers.Offer)},
		{GroupOffers, "PATCH", "/api/v1/offers/{id}", authKey, byIDWithBody(decodePatch, a.svc.Offers.UpdateOffer)},
		{GroupOffers, "GET", "/api/v1/offers/{id}/partners/{partnerId}/terms", authKey, byOfferPartner(a.svc.Offers.Terms)},
		{GroupOffers, "PUT", "/api/v1/offers/{id}/partners/{partnerId}/terms", authKey, a.putTerms},
		{GroupOffers, "DELETE", "/api/v1/offers/{id}/partners/{partnerId}/terms", authKey, byOfferPartner(a.svc.Offers.DeleteTerms)},
		{GroupPartners, "GET", "/api/v1/partners", authKey, a.listPartners},
		{GroupPartners, "GET", "/api/v1/partners/{id}", authKey, byID(a.svc.Partners.Partner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/approve", authKey, byID(a.svc.Partners.ApprovePartner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/reject", authKey, byID(a.svc.Partners.RejectPartner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/ban", authKey, byID(a.svc.Partners.BanPartner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/reactivate", authKey, byID(a.svc.Partners.ReactivatePartner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/invite", authKey, noStore(a.invitePartner)},
		{GroupPartners, "PUT", "/api/v1/partners/{id}/postback", authKey, byIDWithBody(decodeBody, a.svc.Endpoints.PutPostback)},
		{GroupPartners, "GET", "/api/v1/partners/{id}/postback", authKey, byID(a.svc.Endpoints.Postback)},
		{GroupPartners, "DELETE", "/api/v1/partners/{id}/postback", authKey, byID(a.svc.Endpoints.DeletePostback)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/postback/test", authKey, sendTest(a.svc.Endpoints.SendTestPostback)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/postback/enable", authKey, byID(a.svc.Endpoints.EnablePostback)},
		{GroupConversions, "POST", "/api/v1/conversions", authKey, a.createConversion},
		{GroupConversions, "GET", "/api/v1/conversions", authKey, a.listConversions},
		{GroupConversions, "GET", "/api/v1/conversions/{id}", authKey, byID(a.svc.Conversions.Conversion)},
		{GroupConversions, "POST", "/api/v1/conversions/{id}/approve", authKey, byID(a.svc.Conversions.ApproveConversion)},
		{GroupConversions, "POST", "/api/v1/conversions/{id}/reject", authKey, byID(a.svc.Conversions.RejectConversion)},
		{GroupConversions, "POST", "/api/v1/conversions/{id}/reverse", authKey, byIDWithBody(decodeBody, a.svc.Conversions.ReverseConversion)},
		{GroupConversions, "GET", "/api/v1/postback-token", authKey, a.postbackToken},
		{GroupConversions, "POST", "/api/v1/postback-token", authKey, noStore(a.createPostbackToken)},
		{GroupConversions, "DELETE", "/api/v1/postback-token", authKey, a.deletePostbackToken},
		{GroupConversions, "GET", "/postback", authPostback, getOnly(a.postback)},
		{GroupReports, "GET", "/api/v1/reports", authKey, a.report},
		{GroupPayouts, "GET", "/api/v1/partners/{id}/balance", authKey, byID(a.svc.Payouts.Balance)},
		{GroupPayouts, "GET", "/api/v1/payouts", authKey, a.listPayouts},
		{GroupPayouts, "POST", "/api/v1/payouts", authKey, created(decodeBody, a.svc.Payouts.CreatePayout)},
		{GroupPayouts, "GET", "/api/v1/payouts/{id}", authKey, a.payout},
		{GroupPayouts, "POST", "/api/v1/payouts/{id}/paid", authKey, byID(a.svc.Payouts.MarkPaid)},
		{GroupApplications, "POST", "/api/public/brands/{brandId}/applications", authForm, a.apply},
		{GroupWebhooks, "POST", "/api/public/webhooks", authKey, noStore(created(decodeBody, a.svc.Endpoints.CreateSubscription))},
		{GroupWebhooks, "GET", "/api/public/webhooks", authKey, listed(a.svc.Endpoints.Subscriptions)},
		{GroupWebhooks, "GET", "/api/public/webhooks/{id}", authKey, byID(a.svc.Endpoints.Subscription)},
		{GroupWebhooks, "PATCH", "/api/public/webhooks/{id}", authKey, byIDWithBody(decodePatch, a.svc.Endpoints.UpdateSubscription)},
		{GroupWebhooks, "DELETE", "/api/public/webhooks/{id}", authKey, byID(a.svc.Endpoints.DeleteSubscription)},
		{GroupWebhooks, "POST", "/api/public/webhooks/{id}/test", authKey, sendTest(a.svc.Endpoints.SendTestEvent)},
		{GroupWebhooks, "POST", "/api/public/webhooks/{id}/enable", authKey, byID(a.svc.Endpoints.EnableSubscription)},
		{GroupWebhooks, "POST", "/api/public/webhooks/{id}/rotate", authKey, noStore(byID(a.svc.Endpoints.RotateSubscriptionKey))},
		{GroupWebhooks, "GET", "/api/public/webhook-events", authPublic, a.webhookEvents},
		{GroupDeliveries, "GET", "/api/v1/deliveries", authKey, a.listDeliveries},
		{GroupDeliveries, "GET", "/api/v1/deliveries/{id}", authKey, byID(a.svc.Deliveries.Delivery)},
		{GroupDeliveries, "POST", "/api/v1/deliveries/{id}/retry", authKey, byID(a.svc.Deliveries.RetryDelivery)},
		// Recovering queues deliveries again, like a retry: the same function
		// serves both, the one that may send to the delivery queue on AWS.
		{GroupDeliveries, "POST", "/api/public/webhooks/{id}/recover", authKey, byIDWithBody(decodeBody, a.svc.Deliveries.RecoverSubscription)},
		{GroupDeliveries, "POST", "/api/v1/partners/{id}/postback/recover", authKey, byIDWithBody(decodeBody, a.svc.Deliveries.RecoverPostback)},
		{GroupKeys, "GET", "/api/v1/keys", authKey, listed(a.svc.Identity.ActiveAPIKeys)},
		{GroupKeys, "POST", "/api/v1/keys", authKey, noStore(created(decodeOptionalBody, a.svc.Identity.CreateKey))},
		{GroupKeys, "DELETE", "/api/v1/keys/{id}", authKey, byID(a.svc.Identity.DeleteAPIKey)},
		{GroupKeys, "GET", "/api/v1/audit-log", authKey, listed(a.svc.Audit.Entries)},
		// The dashboard's pages, under two greedy routes (API Gateway's
		// {name+}, net/http's {name...}), and the partner application page.
		{GroupDashboard, "GET", "/dashboard", authPages, a.pages},
		{GroupDashboard, "GET", "/dashboard/{path+}", authPages, a.pages},
		{GroupDashboard, "POST", "/dashboard/{path+}", authPages, a.pages},
		{GroupDashboard, "GET", "/apply/{brandId}", authPages, a.pages},
		{GroupDashboard, "POST", "/apply/{brandId}", authPages, a.pages},
		// The partner portal's pages, served by the same function.
		{GroupDashboard, "GET", "/portal", authPages, a.portal},
		{GroupDashboard, "GET", "/portal/{path+}", authPages, a.portal},
		{GroupDashboard, "POST", "/portal/{path+}", authPages, a.portal},
		{GroupClick, "GET", "/c/{offerId}", authNone, getOnly(a.click)},
		{GroupFraud, "GET", "/api/v1/clicks", authKey, a.listClicks},
		{GroupFraud, "GET", "/api/v1/clicks/{id}", authKey, byID(a.svc.Clicks.Click)},
		{GroupFraud, "GET", "/api/v1/fraud/settings", authKey, a.fraudSettings},
		{GroupFraud, "PUT", "/api/v1/fraud/settings", authKey, a.updateFraudSettings},
		{GroupFraud, "GET", "/api/v1/fraud/blocked-ips", authKey, listed(a.svc.Clicks.BlockedIPs)},
		{GroupFraud, "POST", "/api/v1/fraud/blocked-ips", authKey, created(decodeBody, a.svc.Clicks.BlockIP)},
		{GroupFraud, "DELETE", "/api/v1/fraud/blocked-ips/{id}", authKey, byID(a.svc.Clicks.UnblockIP)},
		{GroupAdmin, "POST", "/_admin/brands", authAdmin, a.adminCreateBrand},
		{GroupAdmin, "GET", "/_admin/brands", authAdmin, a.adminListBrands},
		{GroupAdmin, "POST", "/_admin/keys", authAdmin, noStore(a.adminCreateKey)},
		{GroupAdmin, "GET", "/_admin/keys", authAdmin, a.adminListKeys},
		{GroupAdmin, "POST", "/_admin/keys/{id}/revoke", authAdmin, a.adminRevokeKey},
		{GroupAdmin, "POST", "/_admin/users", authAdmin, a.adminCreateUser},
		{GroupAdmin, "POST", "/_admin/users/reset", authAdmin, a.adminResetPassword},
		{GroupHealth, "GET", "/healthz", authNone, healthz},
		{GroupHealth, "GET", "/readyz", authNone, a.readyz},
	}
}

// Routes lists the routes of group as "METHOD /path" (the path in API
// Gateway's syntax, which is net/http's but for a greedy {name+}, net/http's
// {name...}), in the order they are registered; nil for an unknown group.
// Deployment templates are checked against it.
func Routes(group string) []string {
	var out []string
	for _, rt := range (&API{}).routes() { // method values only: nothing is called
		if rt.group == group {
			out = append(out, rt.method+" "+rt.pattern)
		}
	}
	return out
}

// Handler returns the routes of the given groups (all but admin when none
// is given; admin only with an AdminToken), wrapped in logging and recovery.
// Unknown paths answer 404 and known paths with another method 405 (as does
// CONNECT host:port: this is no proxy), all in the error shape and
// authenticated and counted like the routes of their area, so that they
// carry the rate-limit headers too.
func (a *API) Handler(groups ...string) http.Handler {
	mux := http.NewServeMux()
	type knownPath struct {
		methods []string
		auth    auth
	}
	paths := map[string]*knownPath{}
	var methods []string // every method a route serves, for CONNECT
	fallback := slices.Contains(groups, GroupFallback)
	for _, rt := range a.routes() {
		if !slices.Contains(methods, rt.method) {
			methods = append(methods, rt.method)
		}
		switch {
		case rt.group == GroupAdmin && (a.cfg.AdminToken == "" || !slices.Contains(groups, GroupAdmin)):
			continue
		case fallback:
		case len(groups) > 0 && !slices.Contains(groups, rt.group):
			continue
		default:
			mux.Handle(rt.method+" "+muxPattern(rt.pattern), a.guard(rt.auth, rt.handle))
		}
		pattern := muxPattern(rt.pattern)
		if paths[pattern] == nil {
			paths[pattern] = &knownPath{auth: rt.auth}
		}
		paths[pattern].methods = append(paths[pattern].methods, rt.method)
	}
	for pattern, known := range paths {
		allow := strings.Join(known.methods, ", ")
		mux.Handle(pattern, a.guard(missAuth(known.auth), func(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
			w.Header().Set("Allow", allow)
			return tally.Errorf(tally.ECodeMethodNotAllowed, "%s is not allowed here; use %s.", r.Method, allow)
		}))
	}
	keyArea, publicArea := a.guard(authKey, unknownPath), a.guard(authPublic, unknownPath)
	proxyRequest := a.guard(authPublic, notAProxy(methods))
	notFound := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case isAuthorityForm(r):
			proxyRequest.ServeHTTP(w, r)
		case inKeyArea(r.URL.Path):
			keyArea.ServeHTTP(w, r)
		default:
			publicArea.ServeHTTP(w, r)
		}
	})
	mux.Handle("/", notFound)
	return a.observe(a.measure(screen(mux, notFound)))
}

// muxPattern turns a route's path into net/http's syntax: a greedy
// {name+} becomes {name...}.
func muxPattern(path string) string { return strings.ReplaceAll(path, "+}", "...}") }

// pages hands a request to the dashboard.
func (a *API) pages(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	return serveOr404(a.cfg.Dashboard, w, r)
}

// portal hands a request to the partner portal.
func (a *API) portal(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	return serveOr404(a.cfg.Portal, w, r)
}

func serveOr404(h http.Handler, w http.ResponseWriter, r *http.Request) error {
	if h == nil {
		return tally.Errorf(tally.ECodeNotFound, "No such endpoint: %s %s.", r.Method, r.URL.Path)
	}
	h.ServeHTTP(w, r)
	return nil
}

func unknownPath(_ http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	if clean := cleanPath(r.URL.EscapedPath()); clean != r.URL.EscapedPath() {
		return tally.Errorf(tally.ECodeNotFound, "No such endpoint: %s %s. Paths are matched as sent; did you mean %s?", r.Method, r.URL.EscapedPath(), clean)
	}
	return tally.Errorf(tally.ECodeNotFound, "No such endpoint: %s %s.", r.Method, r.URL.Path)
}

// missAuth is how a request for a known path with a method it does not
// serve is authenticated: like the path's routes when they take a key or
// the admin token, else counted as a public read.
func missAuth(routes auth) auth {
	if routes == authKey || routes == authAdmin {
		return routes
	}
	return authPublic
}

// inKeyArea reports whether path lies where every route takes an API key:
// an unknown path there answers 401 without a valid key, as its neighbours
// would, and 404 with one.
func inKeyArea(path string) bool {
	for _, area := range []string{"/api/v1", "/api/public/webhooks"} {
		if path == area || strings.HasPrefix(path, area+"/") {
			return true
		}
	}
	return false
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, p identity.Principal) error

// getOnly serves a GET route that records something (a click, a
// conversion): net/http's GET pattern also matches HEAD, which link checkers
// and prefetchers send and which must record nothing, so it answers 405.
func getOnly(handle handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		if r.Method != http.MethodGet {
			w.Header().Set("Cache-Control", "no-store")
			w.Header().Set("Allow", http.MethodGet)
			return tally.Errorf(tally.ECodeMethodNotAllowed, "%s is not allowed here; use GET.", r.Method)
		}
		return handle(w, r, p)
	}
}

// guard authenticates and rate-limits a request before running handle.
func (a *API) guard(mode auth, handle handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := a.admit(w, r, mode)
		if err == nil {
			if ctx := actorOf(r.Context(), mode, p); ctx != r.Context() {
				r = r.WithContext(ctx) // the pages' and the public routes' requests have none
			}
			err = handle(w, r, p)
		}
		if err != nil {
			writeError(w, r, err)
		}
	})
}

// actorOf is ctx carrying who makes the changes a request of mode makes,
// for the audit log: the key's holder, or the admin commands.
func actorOf(ctx context.Context, mode auth, p identity.Principal) context.Context {
	switch mode {
	case authKey:
		return audit.WithActor(ctx, audit.Key(p.KeyID))
	case authAdmin:
		return audit.WithActor(ctx, audit.Admin())
	}
	return ctx
}

// admitHolder counts a request that authenticated as p against the
// credential's bucket, and one refused (err unauthorized) against its
// client IP's, so that guessing credentials is as slow as using one.
func (a *API) admitHolder(w http.ResponseWriter, r *http.Request, p identity.Principal, err error, bucket string) (identity.Principal, error) {
	if tally.ErrorCode(err) == tally.ECodeUnauthorized {
		if limited := a.limit(w, r, "noauth:"+a.sourceIP(r), a.cfg.RateLimit); limited != nil {
			return p, limited
		}
		return p, err
	}
	if err != nil {
		return p, err
	}
	setBrand(r.Context(), p.BrandID)
	return p, a.limit(w, r, bucket+p.KeyID, a.cfg.RateLimit)
}

// admit authenticates a request as mode says and counts it against its
// rate limit, setting the X-RateLimit-* headers. A request without a valid
// key is counted per client IP, so that it carries the headers too and
// guessing keys is as slow as using one.
func (a *API) admit(w http.ResponseWriter, r *http.Request, mode auth) (identity.Principal, error) {
	switch mode {
	case authKey:
		p, err := a.authenticate(r)
		return a.admitHolder(w, r, p, err, "key:")
	case authPostback:
		p, err := a.svc.Identity.AuthenticatePostback(r.Context(), r.URL.Query().Get("token"))
		return a.admitHolder(w, r, p, err, "postback:")
	case authForm:
		return identity.Principal{}, a.limit(w, r, "form:"+a.sourceIP(r), a.cfg.ApplicationRateLimit)
	case authPublic:
		return identity.Principal{}, a.limit(w, r, "public:"+a.sourceIP(r), a.cfg.RateLimit)
	case authAdmin:
		token, ok := bearerToken(r.Header)
		if !ok || subtle.ConstantTimeCompare([]byte(token), []byte(a.cfg.AdminToken)) != 1 {
			return identity.Principal{}, tally.Errorf(tally.ECodeUnauthorized, "Provide the local server's admin token.")
		}
	}
	return identity.Principal{}, nil
}

func (a *API) authenticate(r *http.Request) (identity.Principal, error) {
	token, ok := bearerToken(r.Header)
	if !ok {
		return identity.Principal{}, identity.ErrUnauthorized
	}
	return a.svc.Identity.Authenticate(r.Context(), token)
}

// bearerToken reads "Authorization: Bearer <token>" as RFC 9110 (section
// 11.6.2) and RFC 6750 (section 2.1) define it: one header, a scheme that
// is matched case-insensitively, one or more spaces, and a token68. Anything
// else (no scheme, another scheme, a token with spaces or other characters)
// is no credential at all.
func bearerToken(h http.Header) (string, bool) {
	values := h.Values("Authorization")
	if len(values) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
	token = strings.TrimLeft(token, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || !isToken68(token) {
		return "", false
	}
	return token, true
}

// isToken68 reports whether s is a token68: 1*( ALPHA / DIGIT / "-" / "." /
// "_" / "~" / "+" / "/" ) *"=".
func isToken68(s string) bool {
	body := strings.TrimRight(s, "=")
	if body == "" {
		return false
	}
	for _, c := range []byte(body) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return false
		}
	}
	return true
}

// ClientIP is the address a request came from, as the rate limits count it.
func ClientIP(r *http.Request) string { return clientIP(r) }

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// sourceIP is clientAddr as text, for rate-limit buckets.
func (a *API) sourceIP(r *http.Request) string {
	if addr := a.clientAddr(r); addr.IsValid() {
		return addr.String()
	}
	return clientIP(r)
}

// clientAddr is the address of the client: the TCP peer, or on AWS the
// sourceIp API Gateway saw (which the Lambda adapter puts in RemoteAddr).
// When the peer is a trusted proxy, it is the last address in
// X-Forwarded-For that is not a trusted proxy itself (proxies append the
// address they saw; what comes before it is the client's word).
func (a *API) clientAddr(r *http.Request) netip.Addr {
	peer := parseAddr(r.RemoteAddr)
	if !a.trusted(peer) {
		return peer
	}
	hops := strings.Split(strings.Join(r.Header.Values("X-Forwarded-For"), ","), ",")
	for i := len(hops) - 1; i >= 0; i-- {
		hop := parseAddr(strings.TrimSpace(hops[i]))
		if !hop.IsValid() {
			return peer // a malformed header: trust none of it
		}
		if !a.trusted(hop) {
			return hop
		}
	}
	return peer
}

func (a *API) trusted(addr netip.Addr) bool {
	return addr.IsValid() && slices.ContainsFunc(a.cfg.TrustedProxies, func(p netip.Prefix) bool { return p.Contains(addr) })
}

// parseAddr reads "host:port" or a bare address; the zero Addr when neither.
func parseAddr(s string) netip.Addr {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap()
	}
	addr, _ := netip.ParseAddr(s)
	return addr.Unmap().WithZone("")
}

// limit counts the request against bucket and sets the rate-limit headers.
func (a *API) limit(w http.ResponseWriter, r *http.Request, bucket string, limit int) error {
	d, err := a.svc.Limits.Allow(r.Context(), bucket, limit)
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.Itoa(d.Limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(d.Remaining))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(d.Reset.Unix(), 10))
	if !d.Allowed {
		h.Set("Retry-After", strconv.Itoa(max(int(math.Ceil(d.Wait.Seconds())), 1)))
		return tally.Errorf(tally.ECodeRateLimited, "At most %d requests per minute; retry after the time in Retry-After.", d.Limit)
	}
	return nil
}

// requestInfo is filled in while a request runs, for its log line, and
// holds the request's logger, made when first used: most requests log
// nothing below the level a loaded server runs at, and making a logger
// with attributes costs allocations on every request.
type requestInfo struct {
	id      string
	span    trace.Span
	brandID string
	logged  bool // the Requests observer wrote the request's line (RequestLineObserver)

	once  sync.Once
	log   *slog.Logger
	attrs func() []any // the request's attributes
	base  *slog.Logger
}

// lineFields are the fields of the request's line that find it and that
// its metrics (route, method, status, duration) do not hold: the path only
// when it is not the route's pattern, the brand only when the request had one.
func (info *requestInfo) lineFields(r *http.Request, route string) []slog.Attr {
	fields := []slog.Attr{slog.String("requestId", info.id), slog.String("traceId", info.span.TraceIDString())}
	if info.brandID != "" {
		fields = append(fields, slog.String("brandId", info.brandID))
	}
	if r.URL.Path != route {
		fields = append(fields, slog.String("path", r.URL.Path))
	}
	return fields
}

func (info *requestInfo) logger() *slog.Logger {
	info.once.Do(func() { info.log = info.base.With(info.attrs()...) })
	return info.log
}

type infoKey struct{}

func setBrand(ctx context.Context, brandID string) {
	if info, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		info.brandID = brandID
	}
}

// observe gives every request an id (X-Request-Id) and a span of its
// caller's trace (traceparent) or of a new one, a logger that carries both,
// one JSON log line when it ends (unless the Requests observer wrote it),
// and turns a panic into a 500.
func (a *API) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		reqID := ids.New("req_", start)
		w.Header().Set("X-Request-Id", reqID)
		span := trace.Continue(r.Header.Values(trace.Header))
		info := &requestInfo{id: reqID, span: span, base: a.cfg.Logger, attrs: func() []any {
			attrs := []any{"requestId", reqID, "traceId", span.TraceIDString(), "spanId", span.SpanIDString()}
			if a.cfg.RequestAttrs != nil {
				attrs = append(attrs, a.cfg.RequestAttrs(r)...)
			}
			return attrs
		}}
		ctx := trace.NewContext(context.WithValue(r.Context(), infoKey{}, info), span)
		r = r.WithContext(ctx)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				info.logger().Error("panic", "panic", fmt.Sprint(v))
				if !rec.wrote {
					writeError(rec, r, fmt.Errorf("panic: %v", v))
				}
			}
			if !info.logged && a.cfg.Logger.Enabled(ctx, slog.LevelInfo) {
				info.logger().Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
					"durationMs", time.Since(start).Milliseconds(), "brandId", info.brandID)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

type statusRecorder struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (s *statusRecorder) WriteHeader(code int) {
	if !s.wrote {
		s.status, s.wrote = code, true
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	s.wrote = true
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
