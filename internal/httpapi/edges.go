package httpapi

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
)

// noStore serves a route whose answer carries a secret shown once (an API
// key, a postback token): no cache on the way may keep it.
func noStore(handle handlerFunc) handlerFunc {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		w.Header().Set("Cache-Control", "no-store")
		return handle(w, r, p)
	}
}

// notAProxy answers CONNECT to an authority (host:port), which names no
// resource here: Tally is not a proxy. allow is every method its routes
// serve.
func notAProxy(allow []string) handlerFunc {
	list := strings.Join(allow, ", ")
	return func(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
		w.Header().Set("Allow", list)
		return tally.Errorf(tally.ECodeMethodNotAllowed, "CONNECT is not allowed: this is an API, not a proxy; use %s on its paths.", list)
	}
}

// isAuthorityForm reports whether r is CONNECT host:port, whose URL has
// no path.
func isAuthorityForm(r *http.Request) bool {
	return r.Method == http.MethodConnect && r.URL.Path == "" && r.URL.RawPath == ""
}
