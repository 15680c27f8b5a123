package web

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/ratelimit"
)

// Sign-in throttling: attempts per client IP and per e-mail address in
// fixed 15-minute windows, counted in the store (so across instances)
// before the password is checked, which also bounds the hashing work one
// client can cause.
const (
	signInWindow   = 15 * time.Minute
	signInsPerIP   = 30
	signInsPerUser = 10
)

// Limits counts requests against rate limits (package ratelimit).
type Limits interface {
	AllowPer(ctx context.Context, bucket string, limit int, per time.Duration) (ratelimit.Decision, error)
}

// ThrottleSignIn counts a sign-in attempt against the client address's
// and the e-mail address's budgets, in buckets named from kind ("signin":
// the dashboard's). When either budget is spent it sets Retry-After and
// returns the message to show instead of checking the password; else "".
func ThrottleSignIn(w http.ResponseWriter, r *http.Request, limits Limits, kind, email string) (string, error) {
	for _, limit := range []struct {
		bucket string
		n      int
	}{{kind + "-ip:" + httpapi.ClientIP(r), signInsPerIP}, {kind + "-email:" + email, signInsPerUser}} {
		dec, err := limits.AllowPer(r.Context(), limit.bucket, limit.n, signInWindow)
		if err != nil {
			return "", err
		}
		if !dec.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(dec.Wait.Seconds()))))
			return fmt.Sprintf("Too many sign-in attempts. Try again in %d minutes.", int(math.Ceil(dec.Wait.Minutes()))), nil
		}
	}
	return "", nil
}
