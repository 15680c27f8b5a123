package team

import (
	"net/http"
	"strings"

	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// actionLabels name the audit log's actions as the pages do.
var actionLabels = map[string]string{
	audit.OfferCreated:         "Offer created",
	audit.OfferUpdated:         "Offer changed",
	audit.TermsChanged:         "Partner terms changed",
	audit.ConversionApproved:   "Conversion approved",
	audit.ConversionRejected:   "Conversion rejected",
	audit.ConversionReversed:   "Conversion reversed",
	audit.PartnerApproved:      "Partner approved",
	audit.PartnerRejected:      "Application rejected",
	audit.PartnerBanned:        "Partner banned",
	audit.PartnerReactivated:   "Partner reactivated",
	audit.PartnerInvited:       "Partner invited to the portal",
	audit.KeyCreated:           "API key created",
	audit.KeyRevoked:           "API key revoked",
	audit.WebhookCreated:       "Webhook added",
	audit.WebhookUpdated:       "Webhook changed",
	audit.WebhookDeleted:       "Webhook deleted",
	audit.WebhookEnabled:       "Webhook turned back on",
	audit.PostbackUpdated:      "Postback set",
	audit.PostbackDeleted:      "Postback deleted",
	audit.PostbackEnabled:      "Postback turned back on",
	audit.PostbackTokenCreated: "Postback token made",
	audit.PostbackTokenDeleted: "Postback token deleted",
	audit.PayoutCreated:        "Payout created",
	audit.PayoutPaid:           "Payout marked paid",
	audit.BrandTimezoneChanged: "Time zone changed",
	audit.FraudSettingsUpdated: "Fraud settings changed",
	audit.AddressBlocked:       "Address blocked",
	audit.AddressUnblocked:     "Address unblocked",
	audit.UserInvited:          "User invited",
	audit.InvitationRevoked:    "Invitation withdrawn",
	audit.UserJoined:           "User joined",
	audit.UserRoleChanged:      "Role changed",
	audit.UserRemoved:          "User removed",
	audit.PasswordResetCreated: "Reset link made",
	audit.PasswordReset:        "Password reset",
}

// targetPages are the pages of the records an entry can name, by id
// prefix; a partner's postback is on the partner's page.
var targetPages = map[string]string{
	"off_": "/dashboard/offers/",
	"prt_": "/dashboard/partners/",
	"cnv_": "/dashboard/conversions/",
	"sub_": "/dashboard/webhooks/",
	"pay_": "/dashboard/payouts/",
}

// entryRow is an entry as the page shows it.
type entryRow struct {
	audit.Entry
	Who, What, Link string
}

type auditData struct {
	Entries []entryRow
	Page    web.Page
}

func (p *Pages) auditLog(w http.ResponseWriter, r *web.Request) error {
	entries, next, err := p.svc.Audit.Entries(r.Context(), r.Subject, records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	if err != nil {
		return err
	}
	data := auditData{}
	for _, e := range entries {
		row := entryRow{Entry: e, Who: e.Actor.Label(), What: actionLabels[e.Action]}
		if row.What == "" {
			row.What = e.Action
		}
		for prefix, page := range targetPages {
			if strings.HasPrefix(e.TargetID, prefix) {
				row.Link = page + e.TargetID
			}
		}
		if e.Action == audit.PostbackUpdated || e.Action == audit.PostbackDeleted {
			row.Link = "/dashboard/partners/" + e.TargetID
		}
		data.Entries = append(data.Entries, row)
	}
	data.Page = web.PageOf(r, next)
	p.site.Render(w, "audit", r.View("Audit log", "audit", data))
	return nil
}
