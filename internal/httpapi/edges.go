package httpapi

import (
	"net/http"

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
