package dashboard

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

type webhooksData struct {
	Subscriptions []tally.Subscription
	Events        []catalog.EventType
	Values        map[string]string
	Checked       []string
	Errors        map[string]string
	Created       *tally.Subscription
	Secret        string // shown once, right after creation
	Page          web.Page
}

func (d endpointPages) webhooksData(r *request) (webhooksData, error) {
	subs, next, err := d.svc.Endpoints.Subscriptions(r.Context(), r.Subject, records.ListParams{Cursor: r.URL.Query().Get("cursor")})
	return webhooksData{Subscriptions: subs, Events: catalog.Subscribable(), Page: web.PageOf(r, next), Values: map[string]string{}, Errors: map[string]string{}}, err
}

func (d endpointPages) webhooks(w http.ResponseWriter, r *request) error {
	data, err := d.webhooksData(r)
	if err != nil {
		return err
	}
	data.Checked = []string{tally.EventConversionCreated}
	d.site.Render(w, "webhooks", r.View("Webhooks", "webhooks", data))
	return nil
}

// newSecret makes a webhook signing secret, which the page that made it
// shows once (as Svix and Stripe do).
func newSecret() (string, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return "whsec_" + hex.EncodeToString(raw), nil
}

// createWebhook subscribes a URL with a signing secret made here.
func (d endpointPages) createWebhook(w http.ResponseWriter, r *request) error {
	u := strings.TrimSpace(r.PostFormValue("url"))
	events := r.PostForm["events"]
	secret, err := newSecret()
	if err != nil {
		return err
	}
	sub, err := d.svc.Endpoints.CreateSubscription(r.Context(), r.Subject, endpoints.SubscriptionInput{URL: &u, Events: events, Secret: &secret})
	data, lerr := d.webhooksData(r)
	if lerr != nil {
		return lerr
	}
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation, tally.ECodeConflict) {
			return err
		}
		data.Errors[web.FieldOr(err, "url", "url", "events")] = tally.ErrorMessage(err)
		data.Values["url"], data.Checked = u, events
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "webhooks", r.View("Webhooks", "webhooks", data))
		return nil
	}
	data.Created, data.Secret, data.Checked = &sub, secret, []string{tally.EventConversionCreated}
	d.site.Render(w, "webhooks", r.View("Webhooks", "webhooks", data))
	return nil
}

// webhookData is one webhook's page: its health and actions, the recover
// form and the edit form.
type webhookData struct {
	tally.Subscription
	Events  []catalog.EventType
	Values  map[string]string // url, since
	Checked []string
	Errors  map[string]string // url, events, since
	Secret  string            // a rotated-in secret, shown once
	Rotated *tally.Time       // until when the previous secret signs too
}

func (d endpointPages) webhookData(r *request) (webhookData, error) {
	sub, err := d.svc.Endpoints.Subscription(r.Context(), r.Subject, r.PathValue("id"))
	return webhookData{Subscription: sub, Events: catalog.Subscribable(), Checked: sub.Events, Errors: map[string]string{},
		Values: map[string]string{"url": sub.URL, "since": sinceDefault(d.svc.Now(), sub.EndpointHealth)}}, err
}

func (d endpointPages) webhook(w http.ResponseWriter, r *request) error {
	data, err := d.webhookData(r)
	if err != nil {
		return err
	}
	d.site.Render(w, "webhook", r.View("Webhook", "webhooks", data))
	return nil
}

// updateWebhook saves the edit form: the URL and events, and a new signing
// secret when asked for (shown once; the old one signs too for
// endpoints.SecretRotationWindow).
func (d endpointPages) updateWebhook(w http.ResponseWriter, r *request) error {
	data, err := d.webhookData(r)
	if err != nil {
		return err
	}
	u := strings.TrimSpace(r.PostFormValue("url"))
	in := endpoints.SubscriptionInput{URL: &u, Events: r.PostForm["events"]}
	if in.Events == nil {
		in.Events = []string{} // none ticked: refused, not left unchanged
	}
	rotate := r.PostFormValue("rotate") == "on"
	if rotate && data.SignatureScheme == tally.SchemeStandardWebhooks {
		// Tally makes the new key of these (an Ed25519 key has no secret
		// to show): the edit is saved, then the key rotated.
		return d.rotateStandardKey(w, r, data, in)
	}
	if rotate {
		secret, err := newSecret()
		if err != nil {
			return err
		}
		in.Secret = &secret
	}
	sub, err := d.svc.Endpoints.UpdateSubscription(r.Context(), r.Subject, data.ID, in)
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.Errors[web.FieldOr(err, "url", "url", "events")] = tally.ErrorMessage(err)
		data.Values["url"], data.Checked = u, in.Events
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "webhook", r.View("Webhook", "webhooks", data))
		return nil
	}
	if !rotate {
		return web.Redirect(w, r, "/dashboard/webhooks/"+sub.ID, "webhook-updated")
	}
	data.Subscription, data.Checked, data.Values["url"] = sub, sub.Events, sub.URL
	data.Secret, data.Rotated = *in.Secret, sub.PreviousSecretExpiresAt
	d.site.Render(w, "webhook", r.View("Webhook", "webhooks", data))
	return nil
}

// rotateStandardKey saves the edit form of a standard-webhooks
// subscription and gives it a new key: a whsec_ secret, shown once, or an
// Ed25519 key, whose public key the page shows.
func (d endpointPages) rotateStandardKey(w http.ResponseWriter, r *request, data webhookData, in endpoints.SubscriptionInput) error {
	_, err := d.svc.Endpoints.UpdateSubscription(r.Context(), r.Subject, data.ID, in)
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.Errors[web.FieldOr(err, "url", "url", "events")] = tally.ErrorMessage(err)
		data.Values["url"], data.Checked = *in.URL, in.Events
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "webhook", r.View("Webhook", "webhooks", data))
		return nil
	}
	sub, err := d.svc.Endpoints.RotateSubscriptionKey(r.Context(), r.Subject, data.ID)
	if err != nil {
		return err
	}
	data.Subscription, data.Checked, data.Values["url"] = sub, sub.Events, sub.URL
	data.Secret, data.Rotated = sub.Secret, sub.PreviousSecretExpiresAt
	d.site.Render(w, "webhook", r.View("Webhook", "webhooks", data))
	return nil
}

func (d endpointPages) testWebhook(w http.ResponseWriter, r *request) error {
	if _, err := d.svc.Endpoints.SendTestEvent(r.Context(), r.Subject, r.PathValue("id")); err != nil {
		return err
	}
	return web.Redirect(w, r, web.BackTo(r, "/dashboard/webhooks"), "webhook-tested")
}

func (d endpointPages) enableWebhook(w http.ResponseWriter, r *request) error {
	if _, err := d.svc.Endpoints.EnableSubscription(r.Context(), r.Subject, r.PathValue("id")); err != nil {
		return err
	}
	return web.Redirect(w, r, web.BackTo(r, "/dashboard/webhooks/"+r.PathValue("id")), "webhook-enabled")
}

// recoverWebhook queues again the webhook's failed deliveries since the
// form's date; a problem shows beside the date.
func (d endpointPages) recoverWebhook(w http.ResponseWriter, r *request) error {
	data, err := d.webhookData(r)
	if err != nil {
		return err
	}
	since := strings.TrimSpace(r.PostFormValue("since"))
	rec, err := d.svc.Deliveries.RecoverSubscription(r.Context(), r.Subject, data.ID, endpoints.RecoverInput{Since: sinceOf(since)})
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation, tally.ECodeInvalidTransition) {
			return err
		}
		data.Values["since"], data.Errors["since"] = since, recoverMessage(err, d.svc.Now())
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "webhook", r.View("Webhook", "webhooks", data))
		return nil
	}
	return web.Redirect(w, r, "/dashboard/webhooks/"+data.ID, recovered("webhook", rec))
}

func (d endpointPages) deleteWebhook(w http.ResponseWriter, r *request) error {
	sub, err := d.svc.Endpoints.Subscription(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	if !web.Confirmed(w, r, web.Confirmation{Active: "webhooks", Heading: "Delete the webhook to " + sub.URL + "?",
		Message: "Every delivery to this URL stops, pending retries included, and a deleted webhook cannot be restored.",
		Button:  "Delete the webhook", Cancel: "/dashboard/webhooks/" + sub.ID}) {
		return nil
	}
	if _, err := d.svc.Endpoints.DeleteSubscription(r.Context(), r.Subject, r.PathValue("id")); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/webhooks", "webhook-deleted")
}

// sinceDefault is the recover form's first date: the day the endpoint
// started failing (or was disabled), else today; in UTC.
func sinceDefault(now time.Time, h tally.EndpointHealth) string {
	switch {
	case h.FailingSince != nil:
		return h.FailingSince.UTC().Format(time.DateOnly)
	case h.DisabledAt != nil:
		return h.DisabledAt.UTC().Format(time.DateOnly)
	}
	return now.Format(time.DateOnly)
}

// sinceOf turns the recover form's date into the API's since: the start of
// that day in UTC. Anything else goes through as typed, for the service to
// refuse with its message.
func sinceOf(date string) *string {
	if t, err := time.Parse(time.DateOnly, date); err == nil {
		date = t.Format(time.RFC3339)
	}
	return &date
}

// recoverMessage says a recover error in the form's words: the form asks
// for a date, not an RFC 3339 time.
func recoverMessage(err error, now time.Time) string {
	msg := tally.ErrorMessage(err)
	if strings.HasPrefix(msg, "since is required") || strings.HasPrefix(msg, "since must be") {
		return "Enter a date, such as " + now.Format(time.DateOnly) + "."
	}
	if strings.HasPrefix(msg, "since is in the future") {
		return "The date is in the future: pick today or a day before."
	}
	return msg
}

// recovered is the notice after a recover: how many, and whether more wait.
func recovered(what string, rec endpoints.Recovery) string {
	done := what + "-recovered"
	if rec.More {
		done += "-more"
	}
	return done + "&n=" + strconv.Itoa(rec.Recovered)
}
