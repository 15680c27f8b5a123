package httpapi

import (
	"net/http"

	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/identity"
)

func (a *API) webhookEvents(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	writeList(w, catalog.Events(), "")
	return nil
}

func (a *API) listDeliveries(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, lp, err := listQuery(r, "type", "status", "event", "subscriptionId", "partnerId", "eventId", "conversionId", "from", "to")
	if err != nil {
		return err
	}
	f := endpoints.DeliveryFilter{Type: q.Get("type"), Status: q.Get("status"), Event: q.Get("event"),
		SubscriptionID: q.Get("subscriptionId"), PartnerID: q.Get("partnerId"),
		EventID: q.Get("eventId"), ConversionID: q.Get("conversionId"), From: q.Get("from"), To: q.Get("to")}
	ds, next, err := a.svc.Deliveries.Deliveries(r.Context(), p.BrandID, f, lp)
	if err != nil {
		return err
	}
	writeList(w, ds, next)
	return nil
}
