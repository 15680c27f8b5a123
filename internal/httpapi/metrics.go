package httpapi

import (
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// RequestObserver is told of every request the API answers, for metrics:
// the route that served it as its pattern ("/api/v1/offers/{id}"; "/" when
// no route did), its method (one of net/http's, or "other"), the status
// and how long the answer took. Both labels come from a fixed set, never
// from what a client wrote, so that a series per value stays bounded.
type RequestObserver interface {
	RequestServed(route, method string, status int, took time.Duration)
}

// RequestLineObserver is a RequestObserver that writes each request's log
// line itself, with the request's metrics: emf.Metrics, which puts the
// line's fields on the request's EMF line, so that a request on AWS
// writes one line. When the Requests observer is one, the API tells it of
// each request with RequestLine, with the fields that find the request
// (requestId, traceId, brandId and, when it is not the route, path) that
// the metrics do not hold already, and writes no line of its own. The
// request's line is at Info: below the logger's level, the observer is
// told of the request with RequestServed, and writes its metrics alone.
type RequestLineObserver interface {
	RequestObserver
	RequestLine(route, method string, status int, took time.Duration, fields ...slog.Attr)
}

// measure tells the Requests observer of each request. It runs inside
// observe, whose recorder holds the status, and just outside the routes'
// ServeMux, which sets the request's Pattern.
func (a *API) measure(next http.Handler) http.Handler {
	if a.cfg.Requests == nil {
		return next
	}
	lines, writesLines := a.cfg.Requests.(RequestLineObserver)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := w.(*statusRecorder)               // Handler puts measure inside observe
		status := http.StatusInternalServerError // unless the handler returns: observe answers a panic 500
		defer func() {
			route, method, took := routeOf(r), methodOf(r), time.Since(start)
			if !writesLines || !a.cfg.Logger.Enabled(r.Context(), slog.LevelInfo) {
				a.cfg.Requests.RequestServed(route, method, status, took)
				return
			}
			info := r.Context().Value(infoKey{}).(*requestInfo) // set by observe
			info.logged = true
			lines.RequestLine(route, method, status, took, info.lineFields(r, route)...)
		}()
		next.ServeHTTP(rec, r)
		status = rec.status
	})
}

// routeOf is the path of the pattern that served r, "/" for none.
func routeOf(r *http.Request) string {
	_, path, found := strings.Cut(r.Pattern, " ")
	switch {
	case !found && r.Pattern == "":
		return "/"
	case !found:
		return r.Pattern // a known path's 405 handler: the pattern is the path
	}
	return path
}

// methodOf is r's method if net/http names it, else "other".
func methodOf(r *http.Request) string {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return r.Method
	}
	return "other"
}
