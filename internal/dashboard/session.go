package dashboard

import (
	"context"

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
