// Package httpapi serves Tally's REST API over net/http: the management API
// under /api/v1, the public API under /api/public, and, on the local server
// only, the admin API the CLI uses. Lambda functions and the local server
// mount the same handlers.
package httpapi

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/tracking"
)

// Config configures the API.
type Config struct {
	// RateLimit is how many requests one API key may make per minute.
	RateLimit int
	// ApplicationRateLimit is how many partner applications one client IP
	// may submit per minute.
	ApplicationRateLimit int
	// AdminToken enables the admin API (used by the CLI against a running
	// local server) for requests bearing it. Empty disables it.
	AdminToken string
	Logger     *slog.Logger
	// RequestAttrs, when set, adds attributes to every log line of a
	// request (a Lambda adds its invocation's ids).
	RequestAttrs func(*http.Request) []any
}

// Defaults of Config.
const (
	DefaultRateLimit            = 100
	DefaultApplicationRateLimit = 10
)

// API holds the handlers.
type API struct {
	svc *tracking.Service
	cfg Config
}

// New returns the API over svc.
func New(svc *tracking.Service, cfg Config) *API {
	if cfg.RateLimit == 0 {
		cfg.RateLimit = DefaultRateLimit
	}
	if cfg.ApplicationRateLimit == 0 {
		cfg.ApplicationRateLimit = DefaultApplicationRateLimit
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
	GroupApplications = "applications"
	GroupWebhooks     = "webhooks"
	GroupDeliveries   = "deliveries"
	GroupAdmin        = "admin"
	// GroupFallback serves no route: it answers what no other function's
	// routes match (API Gateway's $default route) in the error shape, 405
	// with Allow for a known path, 404 otherwise.
	GroupFallback = "fallback"
)

// AllGroups is every group, for the local server that runs everything.
var AllGroups = []string{GroupOffers, GroupPartners, GroupConversions, GroupReports, GroupApplications, GroupWebhooks, GroupDeliveries, GroupAdmin}

type route struct {
	group   string
	method  string
	pattern string
	auth    auth
	handle  func(w http.ResponseWriter, r *http.Request, p tracking.Principal) error
}

// auth says how a route authenticates.
type auth int

const (
	authKey    auth = iota // a brand's API key, rate-limited per key
	authForm               // none; a form that writes, rate-limited per client IP at ApplicationRateLimit
	authPublic             // none; public reading, rate-limited per client IP at RateLimit
	authAdmin              // the local server's admin token
)

func (a *API) routes() []route {
	return []route{
		{GroupOffers, "GET", "/api/v1/offers", authKey, listed(a.svc.Offers)},
		{GroupOffers, "POST", "/api/v1/offers", authKey, created(a.svc.CreateOffer)},
		{GroupOffers, "GET", "/api/v1/offers/{id}", authKey, byID(a.svc.Offer)},
		{GroupPartners, "GET", "/api/v1/partners", authKey, a.listPartners},
		{GroupPartners, "GET", "/api/v1/partners/{id}", authKey, byID(a.svc.Partner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/approve", authKey, byID(a.svc.ApprovePartner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/reject", authKey, byID(a.svc.RejectPartner)},
		{GroupPartners, "POST", "/api/v1/partners/{id}/ban", authKey, byID(a.svc.BanPartner)},
		{GroupConversions, "POST", "/api/v1/conversions", authKey, a.createConversion},
		{GroupConversions, "GET", "/api/v1/conversions", authKey, a.listConversions},
		{GroupConversions, "GET", "/api/v1/conversions/{id}", authKey, byID(a.svc.Conversion)},
		{GroupConversions, "POST", "/api/v1/conversions/{id}/approve", authKey, byID(a.svc.ApproveConversion)},
		{GroupConversions, "POST", "/api/v1/conversions/{id}/reject", authKey, byID(a.svc.RejectConversion)},
		{GroupReports, "GET", "/api/v1/reports", authKey, a.report},
		{GroupApplications, "POST", "/api/public/brands/{brandId}/applications", authForm, a.apply},
		{GroupWebhooks, "POST", "/api/public/webhooks", authKey, created(a.svc.CreateSubscription)},
		{GroupWebhooks, "GET", "/api/public/webhooks", authKey, listed(a.svc.Subscriptions)},
		{GroupWebhooks, "GET", "/api/public/webhooks/{id}", authKey, byID(a.svc.Subscription)},
		{GroupWebhooks, "DELETE", "/api/public/webhooks/{id}", authKey, byID(a.svc.DeleteSubscription)},
		{GroupWebhooks, "POST", "/api/public/webhooks/{id}/test", authKey, a.testSubscription},
		{GroupWebhooks, "GET", "/api/public/webhook-events", authPublic, a.webhookEvents},
		{GroupDeliveries, "GET", "/api/v1/deliveries", authKey, a.listDeliveries},
		{GroupDeliveries, "GET", "/api/v1/deliveries/{id}", authKey, byID(a.svc.Delivery)},
		{GroupDeliveries, "POST", "/api/v1/deliveries/{id}/retry", authKey, byID(a.svc.RetryDelivery)},
		{GroupAdmin, "POST", "/_admin/brands", authAdmin, a.adminCreateBrand},
		{GroupAdmin, "POST", "/_admin/keys", authAdmin, a.adminCreateKey},
		{GroupAdmin, "GET", "/_admin/keys", authAdmin, a.adminListKeys},
		{GroupAdmin, "POST", "/_admin/keys/{id}/revoke", authAdmin, a.adminRevokeKey},
	}
}

// Routes lists the routes of group as "METHOD /path" (the path in
// net/http's pattern syntax, which is also API Gateway's), in the order they
// are registered; nil for an unknown group. Deployment templates are checked
// against it.
func Routes(group string) []string {
	var out []string
	for _, rt := range (&API{}).routes() {
		if rt.group == group {
			out = append(out, rt.method+" "+rt.pattern)
		}
	}
	return out
}

// Handler returns the routes of the given groups (all but admin when none
// is given; admin only with an AdminToken), wrapped in logging and recovery.
// Unknown paths answer 404 and known paths with another method 405, both in
// the error shape.
func (a *API) Handler(groups ...string) http.Handler {
	mux := http.NewServeMux()
	methods := map[string][]string{}
	fallback := slices.Contains(groups, GroupFallback)
	for _, rt := range a.routes() {
		switch {
		case rt.group == GroupAdmin && (a.cfg.AdminToken == "" || !slices.Contains(groups, GroupAdmin)):
			continue
		case fallback:
			methods[rt.pattern] = append(methods[rt.pattern], rt.method)
			continue
		case len(groups) > 0 && !slices.Contains(groups, rt.group):
			continue
		}
		mux.Handle(rt.method+" "+rt.pattern, a.guard(rt))
		methods[rt.pattern] = append(methods[rt.pattern], rt.method)
	}
	for pattern, allowed := range methods {
		allow := strings.Join(allowed, ", ")
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Allow", allow)
			writeError(w, r, tally.Errorf(tally.ECodeMethodNotAllowed, "%s is not allowed here; use %s.", r.Method, allow))
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, tally.Errorf(tally.ECodeNotFound, "No such endpoint: %s %s.", r.Method, r.URL.Path))
	})
	return a.observe(mux)
}

// guard authenticates and rate-limits a route before running it.
func (a *API) guard(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p tracking.Principal
		var err error
		switch rt.auth {
		case authKey:
			p, err = a.svc.Authenticate(r.Context(), bearer(r))
			if err == nil {
				setBrand(r.Context(), p.BrandID)
				err = a.limit(w, r, "key:"+p.KeyID, a.cfg.RateLimit)
			}
		case authForm:
			err = a.limit(w, r, "form:"+clientIP(r), a.cfg.ApplicationRateLimit)
		case authPublic:
			err = a.limit(w, r, "public:"+clientIP(r), a.cfg.RateLimit)
		case authAdmin:
			if subtle.ConstantTimeCompare([]byte(bearer(r)), []byte(a.cfg.AdminToken)) != 1 {
				err = tally.Errorf(tally.ECodeUnauthorized, "Provide the local server's admin token.")
			}
		}
		if err == nil {
			err = rt.handle(w, r, p)
		}
		if err != nil {
			writeError(w, r, err)
		}
	})
}

func bearer(r *http.Request) string {
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return strings.TrimSpace(token)
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// limit counts the request against bucket and sets the rate-limit headers.
func (a *API) limit(w http.ResponseWriter, r *http.Request, bucket string, limit int) error {
	d, err := a.svc.Allow(r.Context(), bucket, limit)
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

// requestInfo is filled in while a request runs, for its log line.
type requestInfo struct{ brandID string }

type infoKey struct{}

func setBrand(ctx context.Context, brandID string) {
	if info, ok := ctx.Value(infoKey{}).(*requestInfo); ok {
		info.brandID = brandID
	}
}

// observe gives every request an id (X-Request-Id), a logger that carries it,
// one JSON log line when it ends, and turns a panic into a 500.
func (a *API) observe(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		reqID := ids.New("req_", start)
		w.Header().Set("X-Request-Id", reqID)
		log := a.cfg.Logger.With("requestId", reqID)
		if a.cfg.RequestAttrs != nil {
			log = log.With(a.cfg.RequestAttrs(r)...)
		}
		info := &requestInfo{}
		ctx := context.WithValue(context.WithValue(r.Context(), loggerKey{}, log), infoKey{}, info)
		r = r.WithContext(ctx)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				log.Error("panic", "panic", fmt.Sprint(v))
				if !rec.wrote {
					writeError(rec, r, fmt.Errorf("panic: %v", v))
				}
			}
			log.Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
				"durationMs", time.Since(start).Milliseconds(), "brandId", info.brandID)
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
