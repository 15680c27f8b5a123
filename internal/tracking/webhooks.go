package tracking

import (
	"context"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/store"
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

// subscriptionRecord is the stored subscription, with its signing secret.
type subscriptionRecord struct {
	tally.Subscription
	Secret string `json:"secret,omitempty"`
}

func (in SubscriptionInput) validate(checkURL func(string) error) error {
	if in.URL == nil {
		return invalid("url is required.")
	}
	if err := checkURL(*in.URL); err != nil {
		return err
	}
	if len(in.Events) == 0 {
		return invalid("events is required: a non-empty list of event names from /api/public/webhook-events.")
	}
	for i, name := range in.Events {
		if !catalog.Known(name) {
			return invalid("events[%d]: %q is not an event; see /api/public/webhook-events.", i, name)
		}
		if slices.Contains(in.Events[:i], name) {
			return invalid("events[%d]: %q is listed twice.", i, name)
		}
	}
	if in.Secret != nil {
		if n := utf8.RuneCountInString(*in.Secret); n < 16 || n > 256 || strings.TrimSpace(*in.Secret) != *in.Secret {
			return invalid("secret must be 16 to 256 characters without leading or trailing spaces.")
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
	now := s.Now()
	rec := subscriptionRecord{
		Subscription: tally.Subscription{ID: ids.New("sub_", now), BrandID: brandID, URL: *in.URL,
			Events: in.Events, HasSecret: in.Secret != nil, CreatedAt: tally.NewTime(now)},
		Secret: deref(in.Secret, ""),
	}
	item := store.Item{Key: subscriptionKey(brandID, rec.ID), Data: mustJSON(rec)}
	err := s.transact(ctx,
		store.Increment(subscriptionCountKey(brandID), map[string]int64{"n": 1}, store.NumLess("n", maxSubscriptions)),
		store.Put(item, store.NotExists()))
	if i, failed := store.FailedOp(err); failed && i == 0 {
		return tally.Subscription{}, tally.Errorf(tally.ECodeConflict, "A brand has at most %d webhook subscriptions; delete one first.", maxSubscriptions)
	}
	if err != nil {
		return tally.Subscription{}, err
	}
	return rec.Subscription, nil
}

// Subscription returns one of the brand's subscriptions.
func (s *Service) Subscription(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	rec, err := s.subscription(ctx, brandID, subscriptionID)
	return rec.Subscription, err
}

func (s *Service) subscription(ctx context.Context, brandID, subscriptionID string) (subscriptionRecord, error) {
	if !ids.Valid("sub_", subscriptionID) {
		return subscriptionRecord{}, notFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	rec, err := getRecord[subscriptionRecord](ctx, s.store, subscriptionKey(brandID, subscriptionID))
	return rec, notFound(err, "webhook subscription", subscriptionID)
}

// Subscriptions lists the brand's subscriptions, newest first.
func (s *Service) Subscriptions(ctx context.Context, brandID string, p ListParams) ([]tally.Subscription, string, error) {
	sp := span{parts: []partition{{pk: brandPK(brandID)}}, prefix: subscriptionSKPrefix}
	recs, next, err := listSpan[subscriptionRecord](ctx, s.store, sp, p, nil)
	subs := make([]tally.Subscription, len(recs))
	for i, r := range recs {
		subs[i] = r.Subscription
	}
	return subs, next, err
}

// subscriptions reads all of a brand's subscriptions, secrets included.
func (s *Service) subscriptions(ctx context.Context, brandID string) ([]subscriptionRecord, error) {
	q := store.Query{PK: brandPK(brandID), SKPrefix: subscriptionSKPrefix, Limit: maxSubscriptions + 1}
	var out []subscriptionRecord
	for {
		page, err := s.store.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			var rec subscriptionRecord
			if err := decode(it, &rec); err != nil {
				return nil, err
			}
			out = append(out, rec)
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			return out, nil
		}
	}
}

// DeleteSubscription removes a subscription; its pending deliveries fail
// at their next attempt instead of being sent.
func (s *Service) DeleteSubscription(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	rec, err := s.subscription(ctx, brandID, subscriptionID)
	if err != nil {
		return tally.Subscription{}, err
	}
	err = s.transact(ctx,
		store.Delete(subscriptionKey(brandID, subscriptionID), store.Exists()),
		store.Increment(subscriptionCountKey(brandID), map[string]int64{"n": -1}))
	if _, failed := store.FailedOp(err); failed {
		return tally.Subscription{}, notFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	return rec.Subscription, err
}

// SendTestEvent emits a webhook.test event that goes to this subscription
// only, whatever events it lists.
func (s *Service) SendTestEvent(ctx context.Context, brandID, subscriptionID string) (tally.Event, error) {
	if _, err := s.subscription(ctx, brandID, subscriptionID); err != nil {
		return tally.Event{}, err
	}
	now := s.Now()
	op, err := s.newEvent(brandID, tally.EventWebhookTest, tally.WebhookTestEventData{
		SubscriptionID: subscriptionID, Message: "This is a test event from Tally.",
	}, now)
	if err != nil {
		return tally.Event{}, err
	}
	op.Item.Attrs["subscriptionId"] = subscriptionID
	if err := s.transact(ctx, op); err != nil {
		return tally.Event{}, err
	}
	var evt tally.Event
	return evt, decode(op.Item, &evt)
}
