package endpoints

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/catalog"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/ssrf"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
	"github.com/tally-hq/tally/webhook"
)

// maxSubscriptions bounds a brand's webhook subscriptions; every event reads
// them all.
const maxSubscriptions = 50

// SubscriptionInput is the body of POST /api/public/webhooks.
type SubscriptionInput struct {
	URL                *string  `json:"url"`
	Events             []string `json:"events"`
	Secret             *string  `json:"secret"`
	SignatureScheme    *string  `json:"signatureScheme"`
	SignatureAlgorithm *string  `json:"signatureAlgorithm"`
	MaxPerSecond       *int     `json:"maxPerSecond"`
}

// SubscriptionRecord is the stored subscription, with its signing secret.
type SubscriptionRecord struct {
	tally.Subscription
	// Secret signs: any string for the tally scheme, a whsec_ secret for
	// standard-webhooks with hmac-sha256, a whsk_ signing key for ed25519.
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

// Key is the key of the subscription's item, to which its sealed secrets
// are bound.
func (r SubscriptionRecord) Key() store.Key { return keys.Subscription(r.BrandID, r.ID) }

// Sealed is r with its secrets sealed by box, as stored.
func (r SubscriptionRecord) Sealed(ctx context.Context, box *secretbox.Box) (SubscriptionRecord, error) {
	return r.withSecrets(func(s string) (string, error) { return box.Seal(ctx, s, r.Key()) })
}

// Opened is r, as stored, with its secrets opened by box, to sign with or
// compare.
func (r SubscriptionRecord) Opened(ctx context.Context, box *secretbox.Box) (SubscriptionRecord, error) {
	return r.withSecrets(func(s string) (string, error) { return box.Open(ctx, s, r.Key()) })
}

func (r SubscriptionRecord) withSecrets(f func(string) (string, error)) (SubscriptionRecord, error) {
	var err, errPrevious error
	r.Secret, err = f(r.Secret)
	r.PreviousSecret, errPrevious = f(r.PreviousSecret)
	return r, errors.Join(err, errPrevious)
}

func (r *SubscriptionRecord) FromItem(it store.Item) {
	if r.SignatureScheme == "" {
		r.SignatureScheme = tally.SchemeTally // stored before there were schemes
	}
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
	if err := validate.First(checkEvents(in.Events), checkScheme(in.SignatureScheme, in.SignatureAlgorithm), checkPace(in.MaxPerSecond)); err != nil {
		return err
	}
	sch, alg := scheme(in.SignatureScheme, in.SignatureAlgorithm)
	return checkSecret(sch, alg, in.Secret)
}

// scheme is the signature scheme and algorithm a subscription input asks
// for: tally unless said, and hmac-sha256 for standard-webhooks unless said.
func scheme(schemeIn, algorithmIn *string) (scheme, algorithm string) {
	scheme = validate.Deref(schemeIn, tally.SchemeTally)
	if scheme == tally.SchemeStandardWebhooks {
		algorithm = validate.Deref(algorithmIn, tally.AlgorithmHMAC)
	}
	return scheme, algorithm
}

func checkScheme(scheme, algorithm *string) error {
	if scheme != nil && *scheme != tally.SchemeTally && *scheme != tally.SchemeStandardWebhooks {
		return validate.InvalidField("signatureScheme", "signatureScheme must be %q or %q.", tally.SchemeTally, tally.SchemeStandardWebhooks)
	}
	if algorithm == nil {
		return nil
	}
	if scheme == nil || *scheme != tally.SchemeStandardWebhooks {
		return validate.InvalidField("signatureAlgorithm", "signatureAlgorithm is for signatureScheme %q only.", tally.SchemeStandardWebhooks)
	}
	if *algorithm != tally.AlgorithmHMAC && *algorithm != tally.AlgorithmEd25519 {
		return validate.InvalidField("signatureAlgorithm", "signatureAlgorithm must be %q or %q.", tally.AlgorithmHMAC, tally.AlgorithmEd25519)
	}
	return nil
}

func checkEvents(events []string) error {
	for i, name := range events {
		if name == tally.EventWebhookTest {
			return validate.Invalid("events[%d]: %q is sent by the test button (POST /api/public/webhooks/{id}/test) only; it cannot be subscribed to.", i, name)
		}
		if !catalog.Known(name) {
			return validate.Invalid("events[%d]: %q is not an event; see /api/public/webhook-events.", i, name)
		}
		if slices.Contains(events[:i], name) {
			return validate.Invalid("events[%d]: %q is listed twice.", i, name)
		}
	}
	return nil
}

// checkSecret checks a secret given for a subscription of the scheme and
// algorithm.
func checkSecret(scheme, algorithm string, secret *string) error {
	switch {
	case secret == nil:
	case algorithm == tally.AlgorithmEd25519:
		return validate.InvalidField("secret", "secret is not taken with signatureAlgorithm %q: Tally keeps the private key and shows publicKey (rotate it with POST /api/public/webhooks/{id}/rotate).", tally.AlgorithmEd25519)
	case scheme == tally.SchemeStandardWebhooks:
		if webhook.CheckSecret(*secret) != nil {
			return validate.InvalidField("secret", "secret must be %s followed by the standard base64 of %d to %d random bytes (or leave it out and Tally makes one).",
				webhook.SecretPrefix, webhook.MinSecretBytes, webhook.MaxSecretBytes)
		}
	default:
		if n := utf8.RuneCountInString(*secret); n < 16 || n > 256 || strings.TrimSpace(*secret) != *secret {
			return validate.Invalid("secret must be 16 to 256 characters without leading or trailing spaces.")
		}
	}
	return nil
}

// newKey makes the signing key of a standard-webhooks subscription: a
// whsec_ secret of 32 random bytes, or an Ed25519 whsk_ key and its whpk_
// public key.
func newKey(algorithm string) (key, publicKey string) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	if algorithm == tally.AlgorithmEd25519 {
		key = webhook.SigningKeyPrefix + base64.StdEncoding.EncodeToString(b)
		publicKey, _ = webhook.PublicKey(key) // well formed: made just now
		return key, publicKey
	}
	return webhook.SecretPrefix + base64.StdEncoding.EncodeToString(b), ""
}

// CreateSubscription subscribes a URL of the brand to events. A secret
// given is stored for signing and never returned; a standard-webhooks
// subscription without one gets a whsec_ secret, shown in this answer only,
// or, with ed25519, a signing key whose publicKey it shows.
func (s *Service) CreateSubscription(ctx context.Context, brandID string, in SubscriptionInput) (tally.Subscription, error) {
	if err := in.validate(s.checkURL); err != nil {
		return tally.Subscription{}, err
	}
	now := s.db.Now()
	scheme, algorithm := scheme(in.SignatureScheme, in.SignatureAlgorithm)
	rec := SubscriptionRecord{
		Subscription: tally.Subscription{ID: ids.New("sub_", now), BrandID: brandID, URL: *in.URL,
			Events: in.Events, HasSecret: in.Secret != nil, SignatureScheme: scheme, SignatureAlgorithm: algorithm, MaxPerSecond: in.MaxPerSecond,
			CreatedAt: tally.NewTime(now), UpdatedAt: tally.NewTime(now)},
		Secret: validate.Deref(in.Secret, ""),
	}
	generated := ""
	if scheme == tally.SchemeStandardWebhooks && in.Secret == nil {
		rec.Secret, rec.PublicKey = newKey(algorithm)
		rec.HasSecret = true
		if algorithm == tally.AlgorithmHMAC {
			generated = rec.Secret
		}
	}
	sealed, err := rec.Sealed(ctx, s.secrets)
	if err != nil {
		return tally.Subscription{}, err
	}
	item := newEndpointItem(rec.Key(), sealed)
	err = s.events.Transact(ctx, append([]store.Op{
		store.Increment(keys.SubscriptionCount(brandID), map[string]int64{"n": 1}, store.NumLess("n", maxSubscriptions)),
		store.Put(item, store.NotExists()),
		outbox.CountEndpoint(brandID)},
		audit.Record(ctx, brandID, audit.WebhookCreated, rec.ID, rec.URL+" ("+strings.Join(rec.Events, ", ")+")", now)...)...)
	if i, failed := store.FailedOp(err); failed && i == 0 {
		return tally.Subscription{}, tally.Errorf(tally.ECodeConflict, "A brand has at most %d webhook subscriptions; delete one first.", maxSubscriptions)
	}
	if err != nil {
		return tally.Subscription{}, err
	}
	rec.FromItem(item)
	rec.Subscription.Secret = generated
	return rec.Subscription, nil
}

// RotateSubscriptionKey gives a standard-webhooks subscription a new
// signing key: a new whsec_ secret (shown in this answer only) or Ed25519
// key (its publicKey shown). The key it replaces signs too for
// SecretRotationWindow. A tally-scheme subscription rotates by PATCH with
// a new secret.
func (s *Service) RotateSubscriptionKey(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	if !ids.Valid("sub_", subscriptionID) {
		return tally.Subscription{}, records.NotFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	for {
		it, rec, err := s.subscriptionItem(ctx, brandID, subscriptionID)
		if err != nil {
			return tally.Subscription{}, err
		}
		if rec.SignatureScheme != tally.SchemeStandardWebhooks {
			return tally.Subscription{}, tally.Errorf(tally.ECodeInvalidTransition,
				"Subscription %s signs with the %q scheme, whose secret is yours: PATCH it with a new secret instead.", subscriptionID, rec.SignatureScheme)
		}
		now := s.db.Now()
		key, publicKey := newKey(rec.SignatureAlgorithm)
		rec.PreviousSecret, rec.PreviousSecretExpiresAt = rec.Secret, ptrTo(tally.NewTime(now.Add(SecretRotationWindow)))
		rec.Secret, rec.PublicKey, rec.UpdatedAt = key, publicKey, tally.NewTime(now)
		op, err := s.replaceSubscription(ctx, it, rec)
		if err != nil {
			return tally.Subscription{}, err
		}
		err = s.events.Transact(ctx, append([]store.Op{op},
			audit.Record(ctx, brandID, audit.WebhookUpdated, rec.ID, rec.URL+": signing key rotated", now)...)...)
		if _, raced := store.FailedOp(err); raced {
			continue
		}
		if err != nil {
			return tally.Subscription{}, err
		}
		if publicKey == "" {
			rec.Subscription.Secret = key
		}
		return rec.Subscription, nil
	}
}

// subscriptionItem reads a subscription's item and record, its secrets
// opened, for a change conditioned on the item as read.
func (s *Service) subscriptionItem(ctx context.Context, brandID, subscriptionID string) (store.Item, SubscriptionRecord, error) {
	var rec SubscriptionRecord
	it, err := s.db.Get(ctx, keys.Subscription(brandID, subscriptionID))
	if err != nil {
		return it, rec, records.NotFound(err, "webhook subscription", subscriptionID)
	}
	if err := records.Decode(it, &rec); err != nil {
		return it, rec, err
	}
	rec, err = rec.Opened(ctx, s.secrets)
	return it, rec, err
}

// replaceSubscription rewrites the subscription's item as read (it) with
// rec, its secrets sealed: so a secret written in clear is sealed at its
// subscription's next change.
func (s *Service) replaceSubscription(ctx context.Context, it store.Item, rec SubscriptionRecord) (store.Op, error) {
	sealed, err := rec.Sealed(ctx, s.secrets)
	return replaceEndpointRecord(it, sealed), err
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
	err = s.events.Transact(ctx, append([]store.Op{
		store.Delete(keys.Subscription(brandID, subscriptionID), store.Exists()),
		store.Increment(keys.SubscriptionCount(brandID), map[string]int64{"n": -1})},
		audit.Record(ctx, brandID, audit.WebhookDeleted, subscriptionID, rec.URL, s.db.Now())...)...)
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
	if err := validate.First(checkEvents(in.Events), checkScheme(in.SignatureScheme, in.SignatureAlgorithm), checkPace(in.MaxPerSecond)); err != nil {
		return tally.Subscription{}, err
	}
	if !ids.Valid("sub_", subscriptionID) {
		return tally.Subscription{}, records.NotFound(store.ErrNotFound, "webhook subscription", subscriptionID)
	}
	for {
		it, rec, err := s.subscriptionItem(ctx, brandID, subscriptionID)
		if err != nil {
			return tally.Subscription{}, err
		}
		now := s.db.Now()
		if err := checkSchemeUnchanged(rec, in); err != nil {
			return tally.Subscription{}, err
		}
		if err := checkSecret(rec.SignatureScheme, rec.SignatureAlgorithm, in.Secret); err != nil {
			return tally.Subscription{}, err
		}
		if rec.PreviousSecretExpiresAt != nil && !now.Before(rec.PreviousSecretExpiresAt.Time) {
			rec.PreviousSecret, rec.PreviousSecretExpiresAt = "", nil
		}
		if (in.URL == nil || *in.URL == rec.URL) && (in.Events == nil || slices.Equal(in.Events, rec.Events)) &&
			(in.Secret == nil || *in.Secret == rec.Secret) && (in.MaxPerSecond == nil || rec.MaxPerSecond != nil && *in.MaxPerSecond == *rec.MaxPerSecond) {
			return rec.Subscription, nil
		}
		before, beforeSecret := rec.Subscription, rec.Secret
		if in.URL != nil {
			rec.URL = *in.URL
		}
		if in.Events != nil {
			rec.Events = in.Events
		}
		if in.MaxPerSecond != nil {
			rec.MaxPerSecond = in.MaxPerSecond
		}
		if in.Secret != nil && *in.Secret != rec.Secret {
			rec.PreviousSecret, rec.PreviousSecretExpiresAt = "", nil
			if rec.Secret != "" {
				rec.PreviousSecret, rec.PreviousSecretExpiresAt = rec.Secret, ptrTo(tally.NewTime(now.Add(SecretRotationWindow)))
			}
			rec.Secret, rec.HasSecret = *in.Secret, true
		}
		rec.UpdatedAt = tally.NewTime(now)
		summary := audit.Changes(before, rec.Subscription, "updatedAt", "previousSecretExpiresAt", "hasSecret")
		if in.Secret != nil && *in.Secret != beforeSecret {
			summary = strings.TrimPrefix(summary+", signing secret changed", ", ")
		}
		op, err := s.replaceSubscription(ctx, it, rec)
		if err != nil {
			return tally.Subscription{}, err
		}
		err = s.events.Transact(ctx, append([]store.Op{op},
			audit.Record(ctx, brandID, audit.WebhookUpdated, rec.ID, rec.URL+": "+summary, now)...)...)
		if _, raced := store.FailedOp(err); raced {
			continue // an attempt or another change came first: apply to the new state
		}
		if err != nil {
			return tally.Subscription{}, err
		}
		return rec.Subscription, nil
	}
}

// MaxPace bounds an endpoint's maxPerSecond.
const MaxPace = 1000

// checkPace checks an endpoint's maxPerSecond, when given.
func checkPace(perSecond *int) error {
	if perSecond != nil && (*perSecond < 1 || *perSecond > MaxPace) {
		return validate.InvalidField("maxPerSecond", "maxPerSecond must be a whole number from 1 to %d (deliveries a second to the endpoint).", MaxPace)
	}
	return nil
}

// PaceOf is the maxPerSecond of the endpoint stored as it (a subscription
// or a postback), 0 when it has none.
func PaceOf(it store.Item) int {
	var ep struct {
		MaxPerSecond int `json:"maxPerSecond"`
	}
	_ = records.Decode(it, &ep)
	return ep.MaxPerSecond
}

// checkSchemeUnchanged refuses a change of signature scheme or algorithm:
// receivers verify with one, so a new one is a new subscription, made
// beside the old until the receiver has switched.
func checkSchemeUnchanged(rec SubscriptionRecord, in SubscriptionInput) error {
	if in.SignatureScheme != nil && *in.SignatureScheme != rec.SignatureScheme {
		return validate.InvalidField("signatureScheme", "signatureScheme cannot change (it is %q): create another subscription with the new scheme and delete this one once the receiver has switched.", rec.SignatureScheme)
	}
	if in.SignatureAlgorithm != nil && *in.SignatureAlgorithm != rec.SignatureAlgorithm {
		return validate.InvalidField("signatureAlgorithm", "signatureAlgorithm cannot change: create another subscription with the new algorithm and delete this one once the receiver has switched.")
	}
	return nil
}

// StoredSubscription is a stored subscription: its record and its item (the
// health).
type StoredSubscription struct {
	Rec  SubscriptionRecord
	Item store.Item
}
