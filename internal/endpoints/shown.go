package endpoints

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Request is what an attempt of the delivery made at now sends: sub is its
// subscription (nil for a postback, a GET of its filled-in URL) and
// envelope its event's, the body.
func (rec DeliveryRecord) Request(sub *SubscriptionRecord, envelope []byte, now time.Time) outgoing.Request {
	req := outgoing.Request{URL: rec.URL, WebhookID: rec.ID, Event: rec.Event}
	if sub == nil {
		req.Method = http.MethodGet
		return req
	}
	req.Body = envelope
	req.Secrets, req.Scheme = sub.SigningSecrets(now), sub.SignatureScheme
	return req
}

// shownAt is when the request the log shows was sent: at the last attempt,
// or, before the first, when it is due.
func (rec DeliveryRecord) shownAt() time.Time {
	switch {
	case len(rec.Attempts) > 0:
		return rec.Attempts[len(rec.Attempts)-1].At.Time
	case rec.NextAttemptAt != nil:
		return rec.NextAttemptAt.Time
	}
	return rec.CreatedAt.Time
}

// withRequests is the deliveries with the request each sends, made from
// their events and subscriptions as stored now (each read once): the body
// is kept once, with the event, not with every delivery of it.
func (s *Log) withRequests(ctx context.Context, recs []DeliveryRecord) ([]tally.Delivery, error) {
	envelopes := map[string][]byte{}
	subs := map[string]*SubscriptionRecord{}
	out := make([]tally.Delivery, len(recs))
	for i, rec := range recs {
		if err := s.answers.Show(ctx, &rec); err != nil {
			return nil, err
		}
		var sub *SubscriptionRecord
		if rec.Type == tally.DeliveryWebhook {
			var err error
			if sub, err = s.subscriptionOf(ctx, rec, subs); err != nil {
				return nil, err
			}
			if _, ok := envelopes[rec.EventID]; !ok {
				env, err := Envelope(ctx, s.db, rec)
				if err != nil {
					return nil, err
				}
				envelopes[rec.EventID] = env // nil when expired: no body left to show
			}
		}
		at := rec.shownAt()
		out[i] = rec.Delivery
		out[i].Request = ptrTo(rec.Request(sub, envelopes[rec.EventID], at).Shown(at))
	}
	return out, nil
}

// Envelope is the body of the webhook delivery rec: its event's envelope,
// read from the event item, or made from its conversion when the event is
// not stored (rec.Conversion; conversions.CreatedEvent, the same bytes
// whatever the conversion became since). nil when the event or the
// conversion is gone (an event expires as its deliveries do).
func Envelope(ctx context.Context, db *records.DB, rec DeliveryRecord) ([]byte, error) {
	if rec.Conversion != "" {
		c, err := records.Get[tally.Conversion](ctx, db, keys.Conversion(rec.BrandID, rec.Conversion))
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		return records.MustJSON(conversions.CreatedEvent(c)), nil
	}
	it, err := db.Get(ctx, keys.Event(rec.EventID))
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	return it.Data, err
}

// subscriptionOf reads the subscription of a webhook delivery, once per
// subscription (a deleted one signs nothing), its secrets replaced by
// stand-ins.
func (s *Log) subscriptionOf(ctx context.Context, rec DeliveryRecord, subs map[string]*SubscriptionRecord) (*SubscriptionRecord, error) {
	if sub, ok := subs[rec.SubscriptionID]; ok {
		return sub, nil
	}
	sub, err := records.Get[SubscriptionRecord](ctx, s.db, keys.Subscription(rec.BrandID, rec.SubscriptionID))
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	sub.Secret, sub.PreviousSecret = standIn(sub.Secret, sub.SignatureAlgorithm), standIn(sub.PreviousSecret, sub.SignatureAlgorithm)
	subs[rec.SubscriptionID] = &sub
	return &sub, nil
}

// standIn is a key of the algorithm's kind in place of a stored secret
// (none for none): the log masks every signature, so its requests sign with
// stand-ins and the log opens no secret.
func standIn(stored, algorithm string) string {
	if stored == "" {
		return ""
	}
	key, _ := newKey(algorithm)
	return key
}

// conversionEvents tells whether a delivery is of an event a conversion
// caused, reading each conversion event once: deliveries do not store the
// conversion (that would cost every delivery a write unit more once its
// item crosses a kilobyte), and the log is read far less often than
// deliveries are written.
type conversionEvents struct {
	ctx          context.Context
	db           *records.DB
	conversionID string
	of           map[string]bool // event id → caused by the conversion
	err          error           // the first read that failed
}

func (s *Log) conversionEvents(ctx context.Context, conversionID string) *conversionEvents {
	return &conversionEvents{ctx: ctx, db: s.db, conversionID: conversionID, of: map[string]bool{}}
}

func (c *conversionEvents) has(d *DeliveryRecord) bool {
	switch d.Event {
	case tally.EventConversionCreated, tally.EventConversionApproved, tally.EventConversionRejected, tally.EventConversionReversed:
	default:
		return false
	}
	if d.Conversion != "" {
		return d.Conversion == c.conversionID // its conversion.created, not stored
	}
	if of, ok := c.of[d.EventID]; ok || c.err != nil {
		return of
	}
	var evt tally.Event
	it, err := c.db.Get(c.ctx, keys.Event(d.EventID))
	if err == nil {
		err = records.Decode(it, &evt)
	}
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		c.err = err
		return false
	}
	var data tally.ConversionEventData
	_ = json.Unmarshal(evt.Data, &data) // expired: not shown
	c.of[d.EventID] = data.ConversionID == c.conversionID
	return c.of[d.EventID]
}
