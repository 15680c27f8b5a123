package httpapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// StoreReader is the read GET /readyz makes (store.Store has it).
type StoreReader interface {
	Get(ctx context.Context, key store.Key) (store.Item, error)
}

// readyTimeout bounds /readyz's read: a store that takes longer is not
// ready for the API's requests either.
const readyTimeout = 2 * time.Second

type healthStatus struct {
	Status string `json:"status"`
}

// healthz answers while the process runs: it reads nothing.
func healthz(w http.ResponseWriter, _ *http.Request, _ identity.Principal) error {
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, healthStatus{"ok"})
	return nil
}

// readyz answers 200 when the store answers a read of one item, else 503.
func (a *API) readyz(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	w.Header().Set("Cache-Control", "no-store")
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	if _, err := a.svc.Store.Get(ctx, keys.Readiness()); err != nil && !errors.Is(err, store.ErrNotFound) {
		if r.Context().Err() == nil {
			logger(r.Context()).Warn("not ready: the store did not answer", "err", err.Error())
		}
		return tally.Errorf(tally.ECodeUnavailable, "The store does not answer; try again shortly.")
	}
	writeJSON(w, http.StatusOK, healthStatus{"ok"})
	return nil
}
