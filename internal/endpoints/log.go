package endpoints

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Log is the delivery log: what was delivered to whom, and the manual
// retries and recoveries of what failed.
type Log struct {
	db        *records.DB
	endpoints *Service
	// deliveryRetention is how long a delivery stays after its last change.
	deliveryRetention time.Duration
	answers           *Answers
	// requeue hands a delivery made pending again to the transport that
	// attempts it.
	requeue Requeue
}

// Requeue hands a delivery made pending again to its transport: on AWS the
// delivery queue; the local pipeline, which reads the due index, needs
// nothing (NoRequeue).
type Requeue func(context.Context, DeliveryRef) error

// NoRequeue is the Requeue of a transport that finds pending deliveries
// in the due index by itself.
func NoRequeue(context.Context, DeliveryRef) error { return nil }

// NewLog returns the log over db of the deliveries to e's endpoints, each
// kept deliveryRetention after its last change, handing deliveries made
// pending again to requeue.
func NewLog(db *records.DB, e *Service, deliveryRetention time.Duration, requeue Requeue) *Log {
	return &Log{db: db, endpoints: e, deliveryRetention: deliveryRetention, answers: NewAnswers(db, deliveryRetention), requeue: requeue}
}

// RecoverInput is the body of the recover actions.
type RecoverInput struct {
	Since *string `json:"since"`
}

// Recovery says what a recover action queued again.
type Recovery struct {
	Since     tally.Time `json:"since"`
	Recovered int        `json:"recovered"` // failed deliveries queued again
	// More is true when there were more failed deliveries than one call
	// recovers: call again with the same since for the rest.
	More bool `json:"more"`
}

// maxRecover bounds the deliveries one recover call queues again, so that it
// answers well within an HTTP request's time.
const maxRecover = 1000

// RecoverSubscription queues again every failed delivery to a subscription
// whose event came at or after since: the same wh_ and evt_ ids, a fresh
// schedule starting now. The subscription must be enabled.
func (s *Log) RecoverSubscription(ctx context.Context, brandID, subscriptionID string, in RecoverInput) (Recovery, error) {
	if _, err := s.endpoints.SubscriptionRecord(ctx, brandID, subscriptionID); err != nil {
		return Recovery{}, err
	}
	return s.recoverEndpoint(ctx, brandID, subscriptionID, keys.Subscription(brandID, subscriptionID), in)
}

// RecoverPostback is RecoverSubscription for a partner's postback.
func (s *Log) RecoverPostback(ctx context.Context, brandID, partnerID string, in RecoverInput) (Recovery, error) {
	if _, err := s.endpoints.PostbackRecord(ctx, brandID, partnerID); err != nil {
		return Recovery{}, err
	}
	return s.recoverEndpoint(ctx, brandID, partnerID, keys.Postback(brandID, partnerID), in)
}

func (s *Log) recoverEndpoint(ctx context.Context, brandID, endpointID string, key store.Key, in RecoverInput) (Recovery, error) {
	if in.Since == nil {
		return Recovery{}, validate.Invalid("since is required: an RFC 3339 time; failed deliveries of events since then are sent again.")
	}
	since, err := time.Parse(time.RFC3339Nano, *in.Since)
	if err != nil {
		return Recovery{}, validate.Invalid("since must be an RFC 3339 time such as 2026-11-22T10:00:00Z.")
	}
	now := s.db.Now()
	if since.Truncate(time.Millisecond).After(now) {
		return Recovery{}, validate.Invalid("since is in the future.")
	}
	it, err := s.db.Get(ctx, key)
	if err != nil {
		return Recovery{}, err
	}
	if HealthOf(it).Status == tally.EndpointDisabled {
		return Recovery{}, tally.Errorf(tally.ECodeInvalidTransition, "The endpoint is disabled; enable it before recovering its deliveries.")
	}
	out := Recovery{Since: tally.NewTime(since)}
	sp := records.Span{From: ids.Floor("wh_", since), Filter: "recover"}
	for shard := range keys.Shards {
		sp.Parts = append(sp.Parts, records.Partition{Index: store.GSI2, PK: keys.DeliveriesByEndpoint(brandID, endpointID, shard)})
	}
	failed := func(d *DeliveryRecord) bool { return d.Status == tally.DeliveryFailed }
	p := records.ListParams{Limit: records.MaxLimit}
	for {
		recs, next, err := records.ListSpan(ctx, s.db, sp, p, failed)
		if err != nil {
			return out, err
		}
		for _, rec := range recs {
			if out.Recovered == maxRecover {
				out.More = true
				return out, nil
			}
			_, err := s.restart(ctx, rec)
			if _, changed := store.FailedOp(err); changed {
				continue // retried or recovered meanwhile
			}
			if err != nil {
				return out, err
			}
			out.Recovered++
		}
		if p.Cursor = next; next == "" {
			return out, nil
		}
	}
}

// Delivery returns one of the brand's deliveries with all its attempts.
func (s *Log) Delivery(ctx context.Context, brandID, deliveryID string) (tally.Delivery, error) {
	if !ids.Valid("wh_", deliveryID) {
		return tally.Delivery{}, records.NotFound(store.ErrNotFound, "delivery", deliveryID)
	}
	rec, err := records.Get[DeliveryRecord](ctx, s.db, keys.Delivery(brandID, deliveryID))
	if err != nil {
		return tally.Delivery{}, records.NotFound(err, "delivery", deliveryID)
	}
	out, err := s.withRequests(ctx, []DeliveryRecord{rec})
	if err != nil {
		return tally.Delivery{}, err
	}
	return out[0], nil
}

// DeliveryFilter narrows GET /deliveries. From and To are as for
// conversions. ConversionID keeps the deliveries of the events a
// conversion caused.
type DeliveryFilter struct {
	Type, Status, Event, SubscriptionID, PartnerID, EventID, ConversionID string
	From, To                                                              string
}

// Deliveries lists the brand's deliveries, newest first. Each filter is
// served by keys (docs/data-model.md): an endpoint's deliveries by GSI2, a
// pending or failed status (and a type with it) by GSI1, a time span and
// an event id by sort-key bounds (ids sort by their event's time). GSI1
// holds no succeeded delivery (deliveryItem): status succeeded, and a type
// without a status, filter the table's delivery partitions as they are
// read. Succeeded deliveries are most of the log, so that reads little
// more than it lists; a rare type reads at most records.MaxScan items a
// page and answers what it found with a cursor to go on. The event name
// narrows what those read.
func (s *Log) Deliveries(ctx context.Context, brandID string, f DeliveryFilter, p records.ListParams) ([]tally.Delivery, string, error) {
	if err := validate.First(
		validate.OneOf("type", &f.Type, "", tally.DeliveryWebhook, tally.DeliveryPostback),
		validate.OneOf("status", &f.Status, "", tally.DeliveryPending, tally.DeliverySucceeded, tally.DeliveryFailed),
		validate.IDFilter("subscriptionId", "sub_", f.SubscriptionID),
		validate.IDFilter("partnerId", "prt_", f.PartnerID),
		validate.IDFilter("eventId", "evt_", f.EventID),
		validate.IDFilter("conversionId", "cnv_", f.ConversionID),
	); err != nil {
		return nil, "", err
	}
	if f.Event != "" && !catalog.Known(f.Event) && f.Event != tally.PostbackTestEvent {
		return nil, "", validate.Invalid("event: %q is not an event; see /api/public/webhook-events.", f.Event)
	}
	if f.SubscriptionID != "" && f.PartnerID != "" {
		return nil, "", validate.Invalid("subscriptionId and partnerId name different endpoints; give one of them.")
	}
	sp, err := records.TimeSpan("wh_", f.From, f.To)
	if err != nil {
		return nil, "", err
	}
	if f.EventID != "" {
		// A delivery's id carries its event's time: the event's
		// deliveries lie within that millisecond.
		t, _ := ulid.ParseStrict(strings.ToUpper(strings.TrimPrefix(f.EventID, "evt_")))
		at := ulid.Time(t.Time())
		sp.From = max(sp.From, ids.Floor("wh_", at))
		if hi := ids.Ceil("wh_", at); sp.To == "" || hi < sp.To {
			sp.To = hi
		}
	}
	if f.ConversionID != "" {
		// A conversion's events come after it: its id carries its time.
		t, _ := ulid.ParseStrict(strings.ToUpper(strings.TrimPrefix(f.ConversionID, "cnv_")))
		sp.From = max(sp.From, ids.Floor("wh_", ulid.Time(t.Time())))
	}
	sp.Filter = fmt.Sprintf("%q", []string{f.Type, f.Status, f.Event, f.SubscriptionID, f.PartnerID, f.EventID, f.ConversionID})
	types := deliveryTypes
	if f.Type != "" {
		types = []string{f.Type}
	}
	for shard := range keys.Shards {
		switch {
		case f.SubscriptionID != "" || f.PartnerID != "":
			sp.Parts = append(sp.Parts, records.Partition{Index: store.GSI2, PK: keys.DeliveriesByEndpoint(brandID, f.SubscriptionID+f.PartnerID, shard)})
		case f.Status == tally.DeliveryPending || f.Status == tally.DeliveryFailed:
			for _, typ := range types {
				sp.Parts = append(sp.Parts, records.Partition{Index: store.GSI1, PK: keys.DeliveriesByTypeStatus(brandID, typ, f.Status, shard)})
			}
		default:
			// The table alone: a succeeded delivery written with a GSI1
			// entry is listed once.
			sp.Parts = append(sp.Parts, records.Partition{PK: keys.DeliveryPK(brandID, shard)})
		}
	}
	ofConversion := s.conversionEvents(ctx, f.ConversionID)
	keep := func(d *DeliveryRecord) bool {
		return (f.Type == "" || d.Type == f.Type) && (f.Status == "" || d.Status == f.Status) &&
			(f.Event == "" || d.Event == f.Event) && (f.EventID == "" || d.EventID == f.EventID) &&
			(f.ConversionID == "" || ofConversion.has(d))
	}
	recs, next, err := records.ListSpan(ctx, s.db, sp, p, keep)
	if err == nil {
		err = ofConversion.err
	}
	if err != nil {
		return nil, "", err
	}
	out, err := s.withRequests(ctx, recs)
	return out, next, err
}

// RetryDelivery starts a failed delivery's schedule again: attempt 1 now,
// then the retries. Earlier attempts stay in its log. As for recovery, the
// endpoint must be enabled: a disabled one gets nothing until it is.
func (s *Log) RetryDelivery(ctx context.Context, brandID, deliveryID string) (tally.Delivery, error) {
	if !ids.Valid("wh_", deliveryID) {
		return tally.Delivery{}, records.NotFound(store.ErrNotFound, "delivery", deliveryID)
	}
	rec, err := records.Get[DeliveryRecord](ctx, s.db, keys.Delivery(brandID, deliveryID))
	if err != nil {
		return tally.Delivery{}, records.NotFound(err, "delivery", deliveryID)
	}
	if rec.Status != tally.DeliveryFailed {
		return tally.Delivery{}, tally.Errorf(tally.ECodeInvalidTransition, "Only failed deliveries can be retried; this one is %s.", rec.Status)
	}
	endpoint, err := s.db.Get(ctx, rec.EndpointKey())
	if errors.Is(err, store.ErrNotFound) {
		return tally.Delivery{}, tally.Errorf(tally.ECodeInvalidTransition, "The delivery's %s was deleted; there is nowhere to send it.", rec.EndpointName())
	} else if err != nil {
		return tally.Delivery{}, err
	}
	if HealthOf(endpoint).Status == tally.EndpointDisabled {
		return tally.Delivery{}, tally.Errorf(tally.ECodeInvalidTransition, "The delivery's %s is disabled; enable it before retrying its deliveries.", rec.EndpointName())
	}
	rec, err = s.restart(ctx, rec)
	if _, changed := store.FailedOp(err); changed {
		return tally.Delivery{}, tally.Errorf(tally.ECodeInvalidTransition, "The delivery changed meanwhile; it is no longer failed.")
	}
	if err != nil {
		return tally.Delivery{}, err
	}
	out, err := s.withRequests(ctx, []DeliveryRecord{rec})
	if err != nil {
		return tally.Delivery{}, err
	}
	return out[0], nil
}

// restart makes a failed delivery pending with a fresh schedule (attempt 1
// now) and hands it to the transport. It fails with a condition failure if
// the delivery is no longer failed.
func (s *Log) restart(ctx context.Context, rec DeliveryRecord) (DeliveryRecord, error) {
	failed := rec
	now := s.db.Now()
	rec.Status, rec.CycleStart = tally.DeliveryPending, len(rec.Attempts)
	rec.NextAttemptAt, rec.UpdatedAt = ptrTo(tally.NewTime(now)), tally.NewTime(now)
	err := s.db.Transact(ctx, store.Put(s.answers.Item(ctx, rec), store.AttrEquals("status", tally.DeliveryFailed), store.AttrEquals("attempts", strconv.Itoa(len(rec.Attempts)))))
	if err != nil {
		return rec, err
	}
	if err := s.requeue(ctx, DeliveryRef{BrandID: rec.BrandID, DeliveryID: rec.ID}); err != nil {
		// Nothing will pick the delivery up: put it back as it was, so the
		// retry can be asked for again.
		undo := s.db.Transact(ctx, store.Put(DeliveryItem(failed, s.deliveryRetention), store.AttrEquals("attempts", strconv.Itoa(len(rec.Attempts))), store.AttrEquals("status", tally.DeliveryPending)))
		return rec, errors.Join(err, undo)
	}
	return rec, nil
}

// deliveryTypes are every delivery type, for the index partitions a list
// reads.
var deliveryTypes = []string{tally.DeliveryWebhook, tally.DeliveryPostback}

// DefaultDeliveryRetention is how long a delivery and its attempts stay in
// the log after its last change, unless the deployment says otherwise.
const DefaultDeliveryRetention = 30 * 24 * time.Hour
