package httpapi

import (
	"net/http"
	"path"

	"github.com/tally-hq/tally"
)

// MaxHeaderBytes bounds a request's line and headers together; a larger
// request answers 431 headers_too_large. A server in front of the handler
// should let net/http read somewhat more (it answers 431 itself, in plain
// text, past its own limit), so that the error shape is what clients see.
const MaxHeaderBytes = 16 << 10

// screen answers, in the error shape, requests the routes never see: a
// request line and headers over MaxHeaderBytes (431), and a path that is
// not in canonical form ("//api/v1/offers", "/api/v1/./offers"), which
// net/http's ServeMux would redirect with an HTML page. Such a path answers
// like an unknown one: a client that sends it has a bug to see, and a
// redirect would turn a POST into a different request. So does CONNECT
// host:port, which has no path for the routes to match.
func screen(next, notFound http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if headerBytes(r) > MaxHeaderBytes {
			writeError(w, r, tally.Errorf(tally.ECodeHeadersTooLarge, "The request line and headers must total at most %d bytes.", MaxHeaderBytes))
			return
		}
		if p := r.URL.EscapedPath(); isAuthorityForm(r) || r.Method != http.MethodConnect && cleanPath(p) != p {
			notFound.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// headerBytes is the size of the request line and headers as sent, near
// enough: net/http has parsed them already.
func headerBytes(r *http.Request) int {
	n := len(r.Method) + 1 + len(r.URL.RequestURI()) + 1 + len(r.Proto) + 2 + len("Host: ") + len(r.Host) + 2
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + 2 + len(v) + 2
		}
	}
	return n
}

// cleanPath is the canonical form of p as net/http's ServeMux computes it:
// rooted, no empty, "." or ".." segments, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" {
		return "/"
	}
	if p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}
