package dashboard

import (
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/web"
)

// postbackTokenData is Settings → Postback token: the brand's token for
// advertisers' GET postbacks, its secret only right after it was made.
type postbackTokenData struct {
	Token   *tally.PostbackToken
	Created *identity.CreatedPostbackToken
	// Replaced says Created took the place of a token, which stopped working.
	Replaced bool
	Base     string // {public_base_url}
}

func (d settingsPages) postbackTokenData(r *request) (postbackTokenData, error) {
	data := postbackTokenData{Base: web.PublicBase(r.Request)}
	t, err := d.svc.Identity.PostbackToken(r.Context(), r.Subject)
	switch {
	case err == nil:
		data.Token = &t
	case !web.IsCode(err, tally.ECodeNotFound):
		return data, err
	}
	return data, nil
}

func (d settingsPages) postbackToken(w http.ResponseWriter, r *request) error {
	data, err := d.postbackTokenData(r)
	if err != nil {
		return err
	}
	d.site.Render(w, "postback-token", settingsView(r, "Postback token", "postback-token", data))
	return nil
}

// createPostbackToken makes the token, or a new one in place of the
// current one, and shows its secret once.
func (d settingsPages) createPostbackToken(w http.ResponseWriter, r *request) error {
	before, err := d.postbackTokenData(r)
	if err != nil {
		return err
	}
	t, err := d.svc.Identity.CreatePostbackToken(r.Context(), r.Subject)
	if err != nil {
		return err
	}
	data := postbackTokenData{Token: &t.PostbackToken, Created: &t, Replaced: before.Token != nil, Base: before.Base}
	d.site.Render(w, "postback-token", settingsView(r, "Postback token", "postback-token", data))
	return nil
}

func (d settingsPages) deletePostbackToken(w http.ResponseWriter, r *request) error {
	if !web.Confirmed(w, r, web.Confirmation{Active: "settings", Heading: "Delete the postback token?",
		Message: "Postbacks sent with it are refused until you make another token, and the systems that use it need the new one.",
		Button:  "Delete the token", Cancel: "/dashboard/settings/postback-token"}) {
		return nil
	}
	if _, err := d.svc.Identity.DeletePostbackToken(r.Context(), r.Subject); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/settings/postback-token", "token-deleted")
}
