package dashboard

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/fraud"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// fraudData is Settings → Fraud: the settings form, the blocklist and the
// form that adds to it, each with what was typed and the problems.
type fraudData struct {
	Settings    map[string]string
	AutoBan     bool
	Errors      map[string]string
	Blocked     []tally.BlockedIP
	BlockValues map[string]string
	BlockErrors map[string]string
	Page        web.Page
	Weights     []signal
}

// fraudLabels are the settings form's labels, for its messages.
var fraudLabels = map[string]string{
	"threshold": "Threshold", "autoBan.highRiskClicks": "High-risk clicks", "autoBan.windowHours": "Window (hours)", "cidr": "Address or range", "note": "Note",
}

// fraudData reads the settings and a page of the blocklist.
func (d settingsPages) fraudData(r *request) (fraudData, error) {
	s, err := d.svc.Clicks.FraudSettings(r.Context(), r.Subject)
	if err != nil {
		return fraudData{}, err
	}
	blocked, next, err := d.svc.Clicks.BlockedIPs(r.Context(), r.Subject, records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	data := fraudData{
		Settings: map[string]string{
			"threshold":              strconv.Itoa(s.Threshold),
			"autoBan.highRiskClicks": strconv.Itoa(s.AutoBan.HighRiskClicks),
			"autoBan.windowHours":    strconv.Itoa(s.AutoBan.WindowHours),
		},
		AutoBan: s.AutoBan.Enabled, Errors: map[string]string{}, Blocked: blocked, Page: web.PageOf(r, next),
		BlockValues: map[string]string{}, BlockErrors: map[string]string{},
	}
	for _, name := range []string{tally.SignalBlockedIP, tally.SignalBotUserAgent, tally.SignalDatacenterIP, tally.SignalMissingUserAgent, tally.SignalIPVelocity} {
		data.Weights = append(data.Weights, signal{Name: name, Meaning: signalMeanings[name], Weight: fraud.Weights[name]})
	}
	return data, err
}

func (d settingsPages) fraudSettings(w http.ResponseWriter, r *request) error {
	data, err := d.fraudData(r)
	if err != nil {
		return err
	}
	d.site.Render(w, "fraud", settingsView(r, "Fraud", "fraud", data))
	return nil
}

// saveFraudSettings replaces the settings with the form's (the form always
// holds all of them, as PUT /fraud/settings does).
func (d settingsPages) saveFraudSettings(w http.ResponseWriter, r *request) error {
	data, err := d.fraudData(r)
	if err != nil {
		return err
	}
	enabled := r.PostFormValue("autoBan.enabled") == "on"
	in := clicks.FraudSettingsInput{AutoBan: &clicks.AutoBanInput{Enabled: &enabled}}
	data.AutoBan = enabled
	for field, target := range map[string]**int{"threshold": &in.Threshold, "autoBan.highRiskClicks": &in.AutoBan.HighRiskClicks, "autoBan.windowHours": &in.AutoBan.WindowHours} {
		v := strings.TrimSpace(r.PostFormValue(field))
		data.Settings[field] = v
		if n, err := strconv.Atoi(v); err == nil {
			*target = &n
		} else {
			data.Errors[field] = "Enter a whole number."
		}
	}
	if len(data.Errors) == 0 {
		_, err = d.svc.Clicks.UpdateFraudSettings(r.Context(), r.Subject, in)
		if err == nil {
			return web.Redirect(w, r, "/dashboard/settings/fraud", "fraud-saved")
		}
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.Errors[web.FieldOf(err, "threshold", "autoBan.highRiskClicks", "autoBan.windowHours")] = tally.ErrorMessage(err)
	}
	web.Labelled(data.Errors, fraudLabels)
	d.site.RenderStatus(w, http.StatusUnprocessableEntity, "fraud", settingsView(r, "Fraud", "fraud", data))
	return nil
}

func (d settingsPages) blockIP(w http.ResponseWriter, r *request) error {
	cidr, note := strings.TrimSpace(r.PostFormValue("cidr")), strings.TrimSpace(r.PostFormValue("note"))
	_, err := d.svc.Clicks.BlockIP(r.Context(), r.Subject, clicks.BlockedIPInput{CIDR: &cidr, Note: &note})
	if err == nil {
		return web.Redirect(w, r, "/dashboard/settings/fraud", "ip-blocked")
	}
	if !web.IsCode(err, tally.ECodeValidation, tally.ECodeConflict) {
		return err
	}
	data, derr := d.fraudData(r)
	if derr != nil {
		return derr
	}
	data.BlockValues["cidr"], data.BlockValues["note"] = cidr, note
	field := web.FieldOf(err, "cidr", "note")
	if field == "" {
		field = "cidr"
	}
	data.BlockErrors[field] = tally.ErrorMessage(err)
	web.Labelled(data.BlockErrors, fraudLabels)
	d.site.RenderStatus(w, http.StatusUnprocessableEntity, "fraud", settingsView(r, "Fraud", "fraud", data))
	return nil
}

func (d settingsPages) unblockIP(w http.ResponseWriter, r *request) error {
	if _, err := d.svc.Clicks.UnblockIP(r.Context(), r.Subject, r.PathValue("id")); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/settings/fraud", "ip-unblocked")
}
