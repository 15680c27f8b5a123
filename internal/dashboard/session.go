package dashboard

import (
	"context"
	"net/http"
	"time"

	"github.com/tally-hq/tally/internal/accounts"
	"github.com/tally-hq/tally/internal/web"
)

// signIn is how the dashboard signs its users in.
func (d *Dashboard) signIn() web.SignIn {
	return web.SignIn{
		Limits: d.svc.Limits, Kind: "signin", TTL: accounts.SessionTTL,
		Live: func(ctx context.Context, token string) bool {
			_, err := d.svc.Accounts.Session(ctx, token)
			return err == nil
		},
		Check: func(ctx context.Context, email, password string) (string, error) {
			u, err := d.svc.Accounts.SignIn(ctx, email, password)
			if err != nil {
				return "", err
			}
			token, _, err := d.svc.Accounts.StartSession(ctx, u)
			return token, err
		},
		End: d.svc.Accounts.EndSession,
	}
}

// throttle counts an attempt of an invitation's or a reset's form against
// its client's sign-in budget.
func (d *Dashboard) throttle(r *http.Request) (time.Duration, error) { return d.signIn().Wait(r, "") }
