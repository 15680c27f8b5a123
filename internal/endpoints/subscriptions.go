package endpoints

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/ssrf"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// maxSubscriptions bounds a brand's webhook subscriptions; every event reads
// them all.
const maxSubscriptions = 50

// SubscriptionInput is the body of POST /api/public/webhooks.
type SubscriptionInput struct {
	URL    *string  `json:"url"`
	Events []string `json:"events"`
	Secret *string  `json:"secret"`
}

// SubscriptionRecord is the stored subscription, with its signing secret.
type SubscriptionRecord struct {
	tally.Subscription
	Secret string `json:"secret,omitempty"`
	// PreviousSecret is a rotated-out secret that signs next to Secret
	// until PreviousSecretExpiresAt.
	PreviousSecret string `json:"previousSecret,omitempty"`
}

// SigningSecrets are the secrets that sign a delivery made at now.
func (r SubscriptionRecord) SigningSecrets(now time.Time) []string {
	var out []string
	if r.Secret != "" {
		out = append(out, r.Secret)
	}
	if r.PreviousSecret != "" && r.PreviousSecretExpiresAt != nil && now.Before(r.PreviousSecretExpiresAt.Time) {
		out = append(out, r.PreviousSecret)
	}
	return out
}

func (r *SubscriptionRecord) FromItem(it store.Item) {
	h := HealthOf(it)
	r.EndpointHealth, r.UpdatedAt = h.Public(), h.UpdatedAt(r.UpdatedAt)
}

func (in SubscriptionInput) validate(checkURL func(string) error) error {
	if err := validate.First(validate.Text("url", in.URL, true, ssrf.MaxURLLength), validate.Text("secret", in.Secret, false, 256)); err != nil {
		return err
	}
	if err := checkURL(*in.URL); err != nil {
		return err
	}
	if len(in.Events) == 0 {
		return validate.Invalid("events is required: a non-empty list of event names from /api/public/webhook-events.")
	}
	return validate.First(checkEvents(in.Events), checkSecret(in.Secret))
}

func checkEvents(events []string) error {
	for i, name := range events {
		if !catalog.Known(name) {
			return validate.Invalid("events[%d]: %q is not an event; see /api/public/webhook-events.", i, name)
		}
		if slices.Contains(events[:i], name) {
			return validate.Invalid("events[%d]: %q is listed twice.", i, name)
		}
	}
	return nil
}

func checkSecret(secret *string) error {
	if secret != nil {
		if n := utf8.RuneCountInString(*secret); n < 16 || n > 256 || strings.TrimSpace(*secret) != *secret {
			return validate.Invalid("secret must be 16 to 256 characters without leading or trailing spaces.")
		}
	}
	return nil
}

// CreateSubscription subscribes a URL of the brand to events. The secret, if
// any, is stored for signing and never returned.
func (s *Service) CreateSubscription(ctx context.Context, brandID string, in SubscriptionInput) (tally.Subscription, error) {
	if err := in.validate(s.checkURL); err != nil {
		return tally.Subscription{}, err
	}
	now := s.db.Now()
	rec := SubscriptionRecord{
		Subscription: tally.Subscription{ID: ids.New("sub_", now), BrandID: brandID, URL: *in.URL,
			Events: in.Events, HasSecret: in.Secret != nil, CreatedAt: tally.NewTime(now), UpdatedAt: tally.NewTime(now)},
		Secret: validate.Deref(in.Secret, ""),
	}
	item := newEndpointItem(keys.Subscription(brandID, rec.ID), rec)
	err := s.events.Transact(ctx,
		store.Increment(keys.SubscriptionCount(brandID), map[string]int64{"n": 1}, store.NumLess("n", maxSubscriptions)),
		store.Put(item, store.NotExists()),
		outbox.CountEndpoint(brandID))
	if i, failed := store.FailedOp(err); failed && i == 0 {
		return tally.Subscription{}, tally.Errorf(tally.ECodeConflict, "A brand has at most %d webhook subscriptions; delete one first.", maxSubscriptions)
	}
	if err != nil {
		return tally.Subscription{}, err
	}
	rec.FromItem(item)
	return rec.Subscription, nil
}

// Subscription returns one of the brand's subscriptions.
func (s *Service) Subscription(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	rec, err := s.SubscriptionRecord(ctx, brandID, subscriptionID)
	return rec.Subscription, err
}

func (s *Service) SubscriptionRecord(ctx context.Context, brandID, subscriptionID string) (SubscriptionRecord, error) {
	return ReadSubscription(ctx, s.db, brandID, subscriptionID)
}

// ReadSubscription reads one of a brand's subscriptions from db.
func ReadSubscription(ctx context.Context, db *records.DB, brandID, subscriptionID string) (SubscriptionRecord, error) {
	if !ids.Valid("sub_", subscriptionID) {
		return SubscriptionRecord{}, records.NotFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	rec, err := records.Get[SubscriptionRecord](ctx, db, keys.Subscription(brandID, subscriptionID))
	return rec, records.NotFound(err, "webhook subscription", subscriptionID)
}

// Subscriptions lists the brand's subscriptions, newest first.
func (s *Service) Subscriptions(ctx context.Context, brandID string, p records.ListParams) ([]tally.Subscription, string, error) {
	sp := records.Span{Parts: []records.Partition{{PK: keys.BrandPK(brandID)}}, Prefix: keys.SubscriptionSKPrefix}
	recs, next, err := records.ListSpan[SubscriptionRecord](ctx, s.db, sp, p, nil)
	subs := make([]tally.Subscription, len(recs))
	for i, r := range recs {
		subs[i] = r.Subscription
	}
	return subs, next, err
}

// Stored reads all of a brand's subscriptions from db, secrets included.
func Stored(ctx context.Context, db *records.DB, brandID string) ([]StoredSubscription, error) {
	q := store.Query{PK: keys.BrandPK(brandID), SKPrefix: keys.SubscriptionSKPrefix, Limit: maxSubscriptions + 1}
	var out []StoredSubscription
	for {
		page, err := db.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			sub := StoredSubscription{Item: it}
			if err := records.Decode(it, &sub.Rec); err != nil {
				return nil, err
			}
			out = append(out, sub)
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			return out, nil
		}
	}
}

// DeleteSubscription removes a subscription; its pending deliveries fail
// at their next attempt instead of being sent.
func (s *Service) DeleteSubscription(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	rec, err := s.SubscriptionRecord(ctx, brandID, subscriptionID)
	if err != nil {
		return tally.Subscription{}, err
	}
	err = s.events.Transact(ctx,
		store.Delete(keys.Subscription(brandID, subscriptionID), store.Exists()),
		store.Increment(keys.SubscriptionCount(brandID), map[string]int64{"n": -1}))
	if _, failed := store.FailedOp(err); failed {
		return tally.Subscription{}, records.NotFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	return rec.Subscription, err
}

// SendTestEvent emits a webhook.test event that goes to this subscription
// only, whatever events it lists.
func (s *Service) SendTestEvent(ctx context.Context, brandID, subscriptionID string) (tally.Event, error) {
	if _, err := s.SubscriptionRecord(ctx, brandID, subscriptionID); err != nil {
		return tally.Event{}, err
	}
	now := s.db.Now()
	op, err := s.events.Event(brandID, tally.EventWebhookTest, tally.WebhookTestEventData{
		SubscriptionID: subscriptionID, Message: "This is a test event from Tally.",
	}, now)
	if err != nil {
		return tally.Event{}, err
	}
	op.Item.Attrs["subscriptionId"] = subscriptionID
	if err := s.events.Transact(ctx, op); err != nil {
		return tally.Event{}, err
	}
	var evt tally.Event
	return evt, records.Decode(op.Item, &evt)
}

// SecretRotationWindow is how long a replaced secret keeps signing next to
// the new one, so receivers can switch without dropping a delivery.
const SecretRotationWindow = 24 * time.Hour

// UpdateSubscription changes a subscription's url, events or secret (the
// fields given). A new secret signs at once; the one it replaces signs too,
// as a second v1, for SecretRotationWindow. Deliveries already made keep
// their URL; the next attempt of any delivery signs with the secrets of the
// moment. A change to nothing (no field, or the values it has) writes
// nothing and answers the subscription as it is, as UpdateOffer does.
func (s *Service) UpdateSubscription(ctx context.Context, brandID, subscriptionID string, in SubscriptionInput) (tally.Subscription, error) {
	if in.URL != nil {
		if err := s.checkURL(*in.URL); err != nil {
			return tally.Subscription{}, err
		}
	}
	if in.Events != nil && len(in.Events) == 0 {
		return tally.Subscription{}, validate.Invalid("events must name at least one event from /api/public/webhook-events.")
	}
	if err := validate.First(checkEvents(in.Events), checkSecret(in.Secret)); err != nil {
		return tally.Subscription{}, err
	}
	if !ids.Valid("sub_", subscriptionID) {
		return tally.Subscription{}, records.NotFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	for {
		it, err := s.db.Get(ctx, keys.Subscription(brandID, subscriptionID))
		if err != nil {
			return tally.Subscription{}, records.NotFound(err, "webhook subscription", subscriptionID)
		}
		var rec SubscriptionRecord
		if err := records.Decode(it, &rec); err != nil {
			return tally.Subscription{}, err
		}
		now := s.db.Now()
		if rec.PreviousSecretExpiresAt != nil && !now.Before(rec.PreviousSecretExpiresAt.Time) {
			rec.PreviousSecret, rec.PreviousSecretExpiresAt = "", nil
		}
		if (in.URL == nil || *in.URL == rec.URL) && (in.Events == nil || slices.Equal(in.Events, rec.Events)) &&
			(in.Secret == nil || *in.Secret == rec.Secret) {
			return rec.Subscription, nil
		}
		if in.URL != nil {
			rec.URL = *in.URL
		}
		if in.Events != nil {
			rec.Events = in.Events
		}
		if in.Secret != nil && *in.Secret != rec.Secret {
			rec.PreviousSecret, rec.PreviousSecretExpiresAt = "", nil
			if rec.Secret != "" {
				rec.PreviousSecret, rec.PreviousSecretExpiresAt = rec.Secret, ptrTo(tally.NewTime(now.Add(SecretRotationWindow)))
			}
			rec.Secret, rec.HasSecret = *in.Secret, true
		}
		rec.UpdatedAt = tally.NewTime(now)
		op := replaceEndpointRecord(it, rec)
		err = s.events.Transact(ctx, op)
		if _, raced := store.FailedOp(err); raced {
			continue // an attempt or another change came first: apply to the new state
		}
		if err != nil {
			return tally.Subscription{}, err
		}
		return rec.Subscription, nil
	}
}

// StoredSubscription is a stored subscription: its record and its item (the
// health).
type StoredSubscription struct {
	Rec  SubscriptionRecord
	Item store.Item
}
