package dashboard

import (
	"embed"
	"html/template"

	"github.com/tally-hq/tally/internal/web"
)

// templates are the dashboard's own pages and partials (_partials.html).
//
//go:embed templates/*.html
var templates embed.FS

// funcs are the dashboard's own template functions.
var funcs = template.FuncMap{
	"recoverForm": func(action, since, err, status, csrf string) recoverForm {
		return recoverForm{Action: action, Since: since, Error: err, Status: status, CSRF: csrf}
	},
}

// nav is the dashboard's navigation, in order. Settings is one entry whose
// pages share a row of tabs (settingsTabs).
var nav = []web.NavItem{
	{Key: "overview", Label: "Overview", Href: "/dashboard"},
	{Key: "offers", Label: "Offers", Href: "/dashboard/offers"},
	{Key: "partners", Label: "Partners", Href: "/dashboard/partners"},
	{Key: "conversions", Label: "Conversions", Href: "/dashboard/conversions"},
	{Key: "clicks", Label: "Clicks", Href: "/dashboard/clicks"},
	{Key: "reports", Label: "Reports", Href: "/dashboard/reports"},
	{Key: "payouts", Label: "Payouts", Href: "/dashboard/payouts"},
	{Key: "webhooks", Label: "Webhooks", Href: "/dashboard/webhooks"},
	{Key: "deliveries", Label: "Delivery log", Href: "/dashboard/activity/deliveries", Section: "Activity"},
	{Key: "audit", Label: "Audit log", Href: "/dashboard/activity/audit", Section: "Activity"},
	{Key: "settings", Label: "Settings", Href: "/dashboard/settings/general"},
}

// settingsTabs are the Settings pages, in order.
var settingsTabs = []web.NavItem{
	{Key: "general", Label: "General", Href: "/dashboard/settings/general", Section: "Settings"},
	{Key: "keys", Label: "API keys", Href: "/dashboard/settings/keys", Section: "Settings"},
	{Key: "fraud", Label: "Fraud", Href: "/dashboard/settings/fraud", Section: "Settings"},
	{Key: "postback-token", Label: "Postback token", Href: "/dashboard/settings/postback-token", Section: "Settings"},
	{Key: "team", Label: "Team", Href: "/dashboard/settings/team", Section: "Settings"},
}

// settingsView is the view of the Settings page whose tab is tab.
func settingsView(r *request, title, tab string, data any) web.View {
	v := r.View(title, "settings", data)
	v.Tabs, v.Tab = settingsTabs, tab
	return v
}

// flashes are the notices a redirect after a change may show (?done=…):
// fixed texts, so a link cannot make the page say anything else.
var flashes = map[string]string{
	"offer-created":           "The offer was created.",
	"partner-approved":        "The partner was approved.",
	"partner-rejected":        "The application was rejected.",
	"partner-banned":          "The partner was banned.",
	"partner-reactivated":     "The partner is active again.",
	"conversion-reversed":     "The conversion was reversed. Its payout left the partner's balance.",
	"terms-saved":             "The terms were saved. The partner's conversions pay them from now on; those already recorded keep their payout.",
	"terms-removed":           "The terms were removed. The partner earns the offer's payout from its next conversion on.",
	"conversion-approved":     "The conversion was approved.",
	"conversion-rejected":     "The conversion was rejected.",
	"webhook-tested":          "A webhook.test event is on its way; the delivery log shows how it went.",
	"webhook-deleted":         "The webhook was deleted.",
	"delivery-retried":        "The delivery was queued again; it starts over with attempt 1 now.",
	"key-revoked":             "The key was revoked. Requests with it are refused.",
	"offer-updated":           "The offer was saved. Clicks and conversions follow the change at once.",
	"webhook-updated":         "The webhook was saved.",
	"webhook-enabled":         "The webhook is enabled again, with its failure count back at 0. New events are delivered to it.",
	"webhook-recovered":       "Failed deliveries queued again: %d. The delivery log shows how they go.",
	"webhook-recovered-more":  "Failed deliveries queued again: %d, and there are more: recover again with the same date for the rest.",
	"postback-saved":          "The postback was saved.",
	"postback-tested":         "A test postback is on its way, filled with sample values; the delivery log shows how it went.",
	"postback-enabled":        "The postback is enabled again, with its failure count back at 0.",
	"postback-recovered":      "Failed postbacks queued again: %d. The delivery log shows how they go.",
	"postback-recovered-more": "Failed postbacks queued again: %d, and there are more: recover again with the same date for the rest.",
	"postback-deleted":        "The postback was deleted. The partner gets no more postbacks.",
	"fraud-saved":             "The fraud settings were saved. They apply to clicks from now on.",
	"ip-blocked":              "The range was blocked. Its clicks raise blocked_ip from now on.",
	"ip-unblocked":            "The range was removed from the blocklist.",
	"token-deleted":           "The postback token was deleted. GET postbacks are refused until you make another.",
	"signed-out":              "You are signed out.",
}

// recoverForm is the recover form of an endpoint's page ("recover").
type recoverForm struct {
	Action, Since, Error, Status, CSRF string
}
