package dashboard

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// keyRow is a key with how long ago it was used.
type keyRow struct {
	tally.APIKey
	LastUsed string
}

type keysData struct {
	Keys    []keyRow
	Created *identity.CreatedAPIKey // shown once, right after creation
	Name    string
	Error   string
	Page    web.Page
}

func (d settingsPages) keysData(r *request) (keysData, error) {
	keys, next, err := d.svc.Identity.ActiveAPIKeys(r.Context(), r.Subject, records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	data := keysData{Page: web.PageOf(r, next)}
	for _, k := range keys {
		data.Keys = append(data.Keys, keyRow{APIKey: k, LastUsed: web.Ago(d.svc.Now(), k.LastUsedAt)})
	}
	return data, err
}

func (d settingsPages) keys(w http.ResponseWriter, r *request) error {
	data, err := d.keysData(r)
	if err != nil {
		return err
	}
	d.site.Render(w, "keys", settingsView(r, "API keys", "keys", data))
	return nil
}

func (d settingsPages) createKey(w http.ResponseWriter, r *request) error {
	name := strings.TrimSpace(r.PostFormValue("name"))
	k, err := d.svc.Identity.CreateKey(r.Context(), r.Subject, identity.APIKeyInput{Name: &name})
	data, lerr := d.keysData(r)
	if lerr != nil {
		return lerr
	}
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.Name, data.Error = name, tally.ErrorMessage(err)
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "keys", settingsView(r, "API keys", "keys", data))
		return nil
	}
	data.Created = &k
	d.site.Render(w, "keys", settingsView(r, "API keys", "keys", data))
	return nil
}

func (d settingsPages) revokeKey(w http.ResponseWriter, r *request) error {
	if !web.Confirmed(w, r, web.Confirmation{Active: "settings", Heading: "Revoke this API key?",
		Message: "Every request with it is refused from now on, and a revoked key cannot be restored: the systems that use it need a new one.",
		Button:  "Revoke the key", Cancel: "/dashboard/settings/keys"}) {
		return nil
	}
	if _, err := d.svc.Identity.DeleteAPIKey(r.Context(), r.Subject, r.PathValue("id")); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/settings/keys", "key-revoked")
}
