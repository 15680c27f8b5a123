package httpapi

import (
	"net/http"

	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/tracking"
)

func (a *API) testSubscription(w http.ResponseWriter, r *http.Request, p tracking.Principal) error {
	evt, err := a.svc.SendTestEvent(r.Context(), p.BrandID, r.PathValue("id"))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, evt)
	return nil
}

func (a *API) webhookEvents(w http.ResponseWriter, r *http.Request, _ tracking.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	writeList(w, catalog.Events(), "")
	return nil
}

func (a *API) listDeliveries(w http.ResponseWriter, r *http.Request, p tracking.Principal) error {
	q, lp, err := listQuery(r, "type", "status", "subscriptionId", "eventId", "from", "to")
	if err != nil {
		return err
	}
	f := tracking.DeliveryFilter{Type: q.Get("type"), Status: q.Get("status"), SubscriptionID: q.Get("subscriptionId"),
		EventID: q.Get("eventId"), From: q.Get("from"), To: q.Get("to")}
	ds, next, err := a.svc.Deliveries(r.Context(), p.BrandID, f, lp)
	if err != nil {
		return err
	}
	writeList(w, ds, next)
	return nil
}
