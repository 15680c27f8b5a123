package dashboard

import (
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// deliveryRow is a delivery with its latest attempt and, for a postback,
// its partner's name.
type deliveryRow struct {
	tally.Delivery
	Last        *tally.Attempt
	PartnerName string
}

type deliveriesData struct {
	Rows     []deliveryRow
	Filter   endpoints.DeliveryFilter
	Types    []string
	Statuses []string
	Partners web.Picker
	Page     web.Page
}

func (d endpointPages) deliveries(w http.ResponseWriter, r *request) error {
	q := r.URL.Query()
	f := endpoints.DeliveryFilter{Type: q.Get("type"), Status: q.Get("status"), SubscriptionID: q.Get("subscriptionId"), PartnerID: q.Get("partnerId")}
	ds, next, err := d.svc.Deliveries.Deliveries(r.Context(), r.Subject, f, records.ListParams{Cursor: q.Get("cursor")})
	if err != nil {
		return err
	}
	dir, err := d.directory(r)
	if err != nil {
		return err
	}
	rows := make([]deliveryRow, len(ds))
	for i, del := range ds {
		rows[i] = deliveryRow{Delivery: del, PartnerName: dir.names[del.PartnerID]}
		if n := len(del.Attempts); n > 0 {
			rows[i].Last = &del.Attempts[n-1]
		}
	}
	partners := dir.partnerPicker(f.PartnerID)
	partners.Label = "Partner (postbacks)"
	d.site.Render(w, "deliveries", r.View("Delivery log", "deliveries", deliveriesData{
		Rows: rows, Filter: f, Page: web.PageOf(r, next), Partners: partners,
		Types:    []string{tally.DeliveryWebhook, tally.DeliveryPostback},
		Statuses: []string{tally.DeliveryPending, tally.DeliverySucceeded, tally.DeliveryFailed},
	}))
	return nil
}

type deliveryData struct {
	tally.Delivery
	PartnerName string
}

func (d endpointPages) delivery(w http.ResponseWriter, r *request) error {
	del, err := d.svc.Deliveries.Delivery(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	data := deliveryData{Delivery: del}
	if del.PartnerID != "" {
		p, err := d.svc.Partners.Partner(r.Context(), r.Subject, del.PartnerID)
		if err != nil {
			return err
		}
		data.PartnerName = p.Name
	}
	d.site.Render(w, "delivery", r.View("Delivery", "deliveries", data))
	return nil
}

func (d endpointPages) retryDelivery(w http.ResponseWriter, r *request) error {
	del, err := d.svc.Deliveries.RetryDelivery(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/activity/deliveries/"+del.ID, "delivery-retried")
}
