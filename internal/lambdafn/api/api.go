// Package api runs the Lambda functions behind API Gateway: each serves
// some of the HTTP API's route groups over the capabilities those groups
// use, wired as on AWS (new conversions and clicks for the table's
// stream), and links nothing that delivers webhooks or hashes passwords
// unless its main passes it in (WithPasswords, WithRequeue).
package api

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/core"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/app"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/emf"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/offers"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/payouts"
	"github.com/tally-hq/tally/internal/portalaccess"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/ssrf"
)

// APIFunc is a Lambda handler for API Gateway HTTP API events (payload
// format 2.0).
type APIFunc func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// APIHandler returns the handler of a function that serves the routes of
// groups. Requests for any other route answer 404 in the API's error shape.
// httpapi.GroupFallback, alone, serves no route: it is the function behind
// API Gateway's $default route, which gets what no other route matches and
// answers 405 with Allow for a known path, 404 otherwise, without reading
// the table.
//
// The request is converted by aws-lambda-go-api-proxy, which sets
// r.RemoteAddr to requestContext.http.sourceIp: the address API Gateway saw
// the connection come from, which the per-IP rate limit of the application
// form counts by (X-Forwarded-For is not trusted; a client can write it).
//
// Each line a request logs through cfg.Logger (its warnings and errors,
// and its request line unless cfg.Requests writes that: emf.Metrics)
// carries apigwRequestId (requestContext.requestId, which API Gateway also
// returns to the client as the apigw-requestid header) and awsRequestId
// (the Lambda invocation), next to the API's own requestId (X-Request-Id).
func APIHandler(svc httpapi.Services, cfg httpapi.Config, groups ...string) (APIFunc, error) {
	if err := checkGroups(groups); err != nil {
		return nil, err
	}
	if slices.Contains(groups, httpapi.GroupDashboard) && cfg.Dashboard == nil {
		return nil, fmt.Errorf("%w: %q needs the dashboard's pages (WithPages)", errUnknownGroup, httpapi.GroupDashboard)
	}
	cfg.RequestAttrs = requestAttrs
	handler := httpapi.New(svc, cfg).Handler(groups...)
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		stripStage(&ev)
		var accessor core.RequestAccessorV2
		req, err := accessor.EventToRequestWithContext(ctx, ev)
		if err != nil {
			logger(cfg).Warn("cannot turn the API Gateway event into a request", "err", err.Error(),
				"apigwRequestId", ev.RequestContext.RequestID, "method", ev.RequestContext.HTTP.Method, "rawPath", ev.RawPath)
			return unreadableEvent(ev), nil
		}
		w := core.NewProxyResponseWriterV2()
		handler.ServeHTTP(w, req)
		resp, err := w.GetProxyResponse()
		if err != nil {
			logger(cfg).Error("the handler wrote no response", "err", err.Error(), "apigwRequestId", ev.RequestContext.RequestID)
			return errorResponse(err), nil
		}
		return resp, nil
	}, nil
}

func logger(cfg httpapi.Config) *slog.Logger {
	if cfg.Logger != nil {
		return cfg.Logger
	}
	return slog.Default()
}

// checkGroups accepts one or more of httpapi's groups, except admin: that
// API exists only in the local server; or the fallback group alone, since
// with it no other group's routes would be served.
func checkGroups(groups []string) error {
	if len(groups) == 0 {
		return fmt.Errorf("%w: name at least one of the groups a function serves", errUnknownGroup)
	}
	switch {
	case slices.Equal(groups, []string{httpapi.GroupFallback}):
		return nil
	case slices.Contains(groups, httpapi.GroupFallback):
		return fmt.Errorf("%w: %q serves no route (it answers what no route matches), so a function serves it alone, not among %q",
			errUnknownGroup, httpapi.GroupFallback, groups)
	}
	for _, g := range groups {
		if g == httpapi.GroupAdmin || !slices.Contains(httpapi.AllGroups, g) {
			return fmt.Errorf("%w %q: a function serves any of %s, or %s alone", errUnknownGroup, g, strings.Join(lambdaGroups(), ", "), httpapi.GroupFallback)
		}
	}
	return nil
}

func lambdaGroups() []string {
	return slices.DeleteFunc(slices.Clone(httpapi.AllGroups), func(g string) bool { return g == httpapi.GroupAdmin })
}

// stripStage removes a named stage's segment from the path. Through the
// execute-api endpoint of a stage other than $default, API Gateway puts
// "/<stage>" in front of rawPath and requestContext.http.path; through a
// custom domain (API mapping) there is no such segment, so those paths are
// left alone even when they happen to start with the stage's name.
func stripStage(ev *events.APIGatewayV2HTTPRequest) {
	rc := &ev.RequestContext
	if rc.Stage == "" || rc.Stage == "$default" || !strings.Contains(rc.DomainName, ".execute-api.") {
		return
	}
	prefix := "/" + rc.Stage
	for _, p := range []*string{&ev.RawPath, &rc.HTTP.Path} {
		if rest, ok := strings.CutPrefix(*p, prefix); ok && (rest == "" || rest[0] == '/') {
			*p = "/" + strings.TrimPrefix(rest, "/")
		}
	}
}

// requestAttrs are the ids that tie a request's log lines to API Gateway's
// access log and to the Lambda invocation; the proxy puts both in the
// request's context.
func requestAttrs(r *http.Request) []any {
	var attrs []any
	if rc, ok := core.GetAPIGatewayV2ContextFromContext(r.Context()); ok && rc.RequestID != "" {
		attrs = append(attrs, "apigwRequestId", rc.RequestID)
	}
	if lc, ok := core.GetRuntimeContextFromContextV2(r.Context()); ok && lc != nil && lc.AwsRequestID != "" {
		attrs = append(attrs, "awsRequestId", lc.AwsRequestID)
	}
	return attrs
}

// unreadableEvent answers an event that does not make an http.Request: a
// body that is not the base64 it claims to be, or a path that is not a URL
// path. API Gateway does not send such events; the answer is still in the
// API's error shape rather than a Lambda error (which API Gateway would turn
// into a bare 500).
func unreadableEvent(ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	if ev.IsBase64Encoded {
		if _, err := base64.StdEncoding.DecodeString(ev.Body); err != nil {
			return errorResponse(tally.Errorf(tally.ECodeInvalidJSON, "The body could not be read: it is marked base64 but is not."))
		}
	}
	return errorResponse(tally.Errorf(tally.ECodeNotFound, "No such endpoint: %s %s.", ev.RequestContext.HTTP.Method, ev.RawPath))
}

// errorResponse answers with the API's error shape.
func errorResponse(err error) events.APIGatewayV2HTTPResponse {
	status, body := httpapi.ErrorBody(err)
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       string(body),
	}
}

// errUnknownGroup is returned by APIHandler for a group httpapi does not
// have.
var errUnknownGroup = errors.New("unknown route group")

// Option adds to what a function serves with.
type Option func(*options)

type options struct {
	zones     func(name string) (*time.Location, error)
	pages     func(httpapi.Services, httpapi.Config) http.Handler
	portal    func(httpapi.Services, httpapi.Config) http.Handler
	requeue   endpoints.Requeue
	passwords accounts.Passwords
	observer  Observer
	secrets   secretbox.Wrapper
}

// Observer is told of the clicks and conversions the function records
// (emf.Metrics).
type Observer interface {
	clicks.Observer
	conversions.Observer
}

// WithObserver tells observer of each click recorded and each status a
// conversion enters.
func WithObserver(observer Observer) Option { return func(o *options) { o.observer = observer } }

// WithZones loads the time zones reports bucket days in with load
// (tzdb.LoadLocation: provided.al2023 has no zone database).
func WithZones(load func(name string) (*time.Location, error)) Option {
	return func(o *options) { o.zones = load }
}

// WithPages serves httpapi.GroupDashboard with the handler pages makes
// (dashboard.New).
func WithPages(pages func(httpapi.Services, httpapi.Config) http.Handler) Option {
	return func(o *options) { o.pages = pages }
}

// WithPortal serves the partner portal's routes of httpapi.GroupDashboard
// with the handler portal makes (portal.New).
func WithPortal(portal func(httpapi.Services, httpapi.Config) http.Handler) Option {
	return func(o *options) { o.portal = portal }
}

// WithRequeue hands deliveries that a manual retry or a recovery made
// pending again to requeue (queue.Requeue: the delivery queue).
func WithRequeue(requeue endpoints.Requeue) Option { return func(o *options) { o.requeue = requeue } }

// WithPasswords keeps the dashboard's users, their passwords hashed with
// passwords (password.Argon2id).
func WithPasswords(passwords accounts.Passwords) Option {
	return func(o *options) { o.passwords = passwords }
}

// WithSecrets seals and opens the webhook signing secrets with the data
// key secrets wraps (awskms.Key); without it the function sets no secret.
func WithSecrets(secrets secretbox.Wrapper) Option { return func(o *options) { o.secrets = secrets } }

// cacheTTL is how long an instance trusts the keys, offers and fraud
// settings it read.
const cacheTTL = 30 * time.Second

// Serve runs a function that serves the HTTP API's routes of groups
// (httpapi.GroupOffers, …) behind API Gateway (HTTP API, payload format
// 2.0). It never returns; a configuration error ends the process with a log
// line saying what to fix, so the function fails at init, not per request.
func Serve(groups []string, opts ...Option) {
	log := lambdafn.Logger()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := httpapi.ConfigFromEnv(log)
	if err != nil {
		lambdafn.Fatal(log, err)
	}
	db, settings := lambdafn.Start(log)
	// Metrics go to stdout as CloudWatch Embedded Metric Format lines; a
	// request's line holds the fields that find it too (it is the
	// request's log line: httpapi.RequestLineObserver).
	metrics := emf.New(os.Stdout)
	cfg.Requests = metrics
	svc := Services(db, settings, append([]Option{WithObserver(metrics)}, opts...)...)
	if o.pages != nil {
		cfg.Dashboard = o.pages(svc, cfg)
	}
	if o.portal != nil {
		cfg.Portal = o.portal(svc, cfg)
	}
	handler, err := APIHandler(svc, cfg, groups...)
	if err != nil {
		lambdafn.Fatal(log, err)
	}
	// A request writes one line (more only for its warnings and errors).
	lambda.Start(emf.PerInvocation(metrics, handler))
}

// Services wires the capabilities the API's routes call over db as on
// AWS: new conversions and clicks leave their rollups (and conversions
// their events) to the table's stream.
func Services(db *records.DB, settings app.Settings, opts ...Option) httpapi.Services {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	w := outbox.NewWriter(db, settings.DeliveryRetention, outbox.EveryEvent{}, nil)
	zones, requeue := o.zones, o.requeue
	if zones == nil {
		zones = time.LoadLocation
	}
	if requeue == nil {
		requeue = endpoints.NoRequeue
	}
	s := httpapi.Services{
		Identity: identity.New(db, cacheTTL),
		Limits:   ratelimit.NewShared(db),
		Offers:   offers.New(db, cacheTTL),
		Reports:  reports.New(db, zones),
		Audit:    audit.NewLog(db),
		Now:      db.Now,
		Store:    db,
	}
	s.Partners = partners.New(db, w, s.Identity)
	s.Offers.WithPartners(s.Partners)
	s.Clicks = clicks.New(db, w, s.Offers, s.Partners, reports.FromStream{}, cacheTTL, o.observer)
	s.Conversions = conversions.New(db, w, s.Offers, s.Partners, reports.FromStream{}, conversions.ForStream{}, o.observer)
	var secrets *secretbox.Box
	if o.secrets != nil {
		secrets = secretbox.New(db.Store, o.secrets)
	}
	s.Endpoints = endpoints.New(db, w, s.Partners, func(u string) error { return ssrf.CheckURL(u, false) }, secrets)
	s.Deliveries = endpoints.NewLog(db, s.Endpoints, settings.DeliveryRetention, requeue)
	s.Payouts = payouts.New(db, w, s.Partners)
	if o.passwords != nil {
		s.Accounts = accounts.New(db, s.Identity, o.passwords)
	}
	s.Portal = portalaccess.New(db, s.Partners, s.Identity, o.passwords)
	return s
}
