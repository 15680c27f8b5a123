package dashboard

import (
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
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
	data := postbackTokenData{Base: publicBase(r.Request)}
	t, err := d.svc.Identity.PostbackToken(r.Context(), r.brandID())
	switch {
	case err == nil:
		data.Token = &t
	case !isCode(err, tally.ECodeNotFound):
		return data, err
	}
	return data, nil
}

func (d settingsPages) postbackToken(w http.ResponseWriter, r *request) error {
	data, err := d.postbackTokenData(r)
	if err != nil {
		return err
	}
	render(w, "postback-token", r.settingsView("Postback token", "postback-token", data))
	return nil
}

// createPostbackToken makes the token, or a new one in place of the
// current one, and shows its secret once.
func (d settingsPages) createPostbackToken(w http.ResponseWriter, r *request) error {
	before, err := d.postbackTokenData(r)
	if err != nil {
		return err
	}
	t, err := d.svc.Identity.CreatePostbackToken(r.Context(), r.brandID())
	if err != nil {
		return err
	}
	data := postbackTokenData{Token: &t.PostbackToken, Created: &t, Replaced: before.Token != nil, Base: before.Base}
	render(w, "postback-token", r.settingsView("Postback token", "postback-token", data))
	return nil
}

func (d settingsPages) deletePostbackToken(w http.ResponseWriter, r *request) error {
	if !confirmed(w, r, confirmation{Active: "settings", Heading: "Delete the postback token?",
		Message: "Postbacks sent with it are refused until you make another token, and the systems that use it need the new one.",
		Button:  "Delete the token", Cancel: "/dashboard/settings/postback-token"}) {
		return nil
	}
	if _, err := d.svc.Identity.DeletePostbackToken(r.Context(), r.brandID()); err != nil {
		return err
	}
	return redirect(w, r, "/dashboard/settings/postback-token", "token-deleted")
}
