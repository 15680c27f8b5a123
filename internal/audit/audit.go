// Package audit keeps each brand's audit log: who changed what, from the
// dashboard or the API, for 90 days.
//
// Who acts travels in the request's context (WithActor: the API's key
// authentication, the dashboard's signed-in pages, the admin commands).
// The services that make a change add its entry to the change's own
// transaction (Record), so an entry is stored exactly when its change is:
// a change that fails, or that a replay finds already made, leaves none,
// and a retry the store makes of a conflicting transaction writes the one
// entry once. A change made by nobody (a hold time elapsing) is not in
// the log.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Retention is how long an entry stays in the log.
const Retention = 90 * 24 * time.Hour

// Kinds of actor.
const (
	ActorUser    = "user"    // a dashboard user; Name is the e-mail address
	ActorKey     = "key"     // an API key; ID is the key's id, never its secret
	ActorAdmin   = "admin"   // the tally command on the server's machine
	ActorSystem  = "system"  // a rule of the brand's (the auto-ban rule); Name says which
	ActorPartner = "partner" // a partner, in the partner portal; Name is its e-mail address
)

// Actor is who made a change.
type Actor struct {
	Type string `json:"type"`
	ID   string `json:"id,omitempty"`
	Name string `json:"name,omitempty"`
}

// Label is the actor as a person reads it: the user's e-mail address,
// "API key key_…", "tally command" or the rule's name.
func (a Actor) Label() string {
	switch a.Type {
	case ActorUser:
		return a.Name
	case ActorKey:
		return "API key " + a.ID
	case ActorAdmin:
		return "tally command"
	case ActorPartner:
		return "partner " + a.Name
	}
	return a.Name
}

// User is the actor of a dashboard user's changes.
func User(userID, email string) Actor { return Actor{Type: ActorUser, ID: userID, Name: email} }

// Key is the actor of an API key's changes.
func Key(keyID string) Actor { return Actor{Type: ActorKey, ID: keyID} }

// Admin is the actor of the admin commands' changes.
func Admin() Actor { return Actor{Type: ActorAdmin} }

// Partner is the actor of the changes a partner makes in the portal.
func Partner(partnerID, email string) Actor {
	return Actor{Type: ActorPartner, ID: partnerID, Name: email}
}

// Rule is the actor of the changes a brand's rule makes by itself.
func Rule(name string) Actor { return Actor{Type: ActorSystem, Name: name} }

type actorKey struct{}

// WithActor returns ctx carrying who acts in it.
func WithActor(ctx context.Context, a Actor) context.Context {
	return context.WithValue(ctx, actorKey{}, a)
}

// ActorOf returns who acts in ctx, if anyone.
func ActorOf(ctx context.Context) (Actor, bool) {
	a, ok := ctx.Value(actorKey{}).(Actor)
	return a, ok
}

// Actions recorded.
const (
	OfferCreated         = "offer.created"
	OfferUpdated         = "offer.updated"
	TermsChanged         = "offer.terms_changed"
	ConversionApproved   = "conversion.approved"
	ConversionRejected   = "conversion.rejected"
	ConversionReversed   = "conversion.reversed"
	PartnerApproved      = "partner.approved"
	PartnerRejected      = "partner.rejected"
	PartnerBanned        = "partner.banned"
	PartnerReactivated   = "partner.reactivated"
	PartnerInvited       = "partner.portal_invited"
	KeyCreated           = "key.created"
	KeyRevoked           = "key.revoked"
	WebhookCreated       = "webhook.created"
	WebhookUpdated       = "webhook.updated"
	WebhookDeleted       = "webhook.deleted"
	WebhookEnabled       = "webhook.enabled"
	PostbackUpdated      = "postback.updated"
	PostbackDeleted      = "postback.deleted"
	PostbackEnabled      = "postback.enabled"
	PostbackTokenCreated = "postback_token.created"
	PostbackTokenDeleted = "postback_token.deleted"
	PayoutCreated        = "payout.created"
	PayoutPaid           = "payout.paid"
	BrandTimezoneChanged = "brand.timezone_changed"
	FraudSettingsUpdated = "fraud.settings_updated"
	AddressBlocked       = "fraud.address_blocked"
	AddressUnblocked     = "fraud.address_unblocked"
	UserInvited          = "user.invited"
	InvitationRevoked    = "user.invitation_revoked"
	UserJoined           = "user.joined"
	UserRoleChanged      = "user.role_changed"
	UserRemoved          = "user.removed"
	PasswordResetCreated = "password.reset_created"
	PasswordReset        = "password.reset"
)

// Entry is one change in a brand's audit log.
type Entry struct {
	ID       string     `json:"id"`
	At       tally.Time `json:"at"`
	Actor    Actor      `json:"actor"`
	Action   string     `json:"action"`
	TargetID string     `json:"targetId"`
	Summary  string     `json:"summary"`
}

// Record returns the operation that adds the entry of a change of
// brandID's, made at `at` by the actor in ctx, to be written in the
// change's transaction; none when no one acts in ctx.
func Record(ctx context.Context, brandID, action, targetID, summary string, at time.Time) []store.Op {
	a, ok := ActorOf(ctx)
	if !ok {
		return nil
	}
	return []store.Op{Op(a, brandID, action, targetID, summary, at)}
}

// Op is the operation that adds an entry made by a.
func Op(a Actor, brandID, action, targetID, summary string, at time.Time) store.Op {
	e := Entry{ID: ids.New("aud_", at), At: tally.NewTime(at), Actor: a, Action: action, TargetID: targetID, Summary: summary}
	return store.Put(store.Item{
		Key:       keys.AuditEntry(brandID, e.ID),
		Data:      records.MustJSON(e),
		ExpiresAt: at.Add(Retention).Unix(),
	})
}

// Log reads the brands' audit logs.
type Log struct{ db *records.DB }

// NewLog returns the Log over db.
func NewLog(db *records.DB) *Log { return &Log{db: db} }

// Entries lists a brand's entries of the last 90 days, newest first. The
// store deletes older ones lazily; until then the list leaves them out
// (a filter, not a bound of the query, so that a cursor made a moment ago
// still continues the same query).
func (l *Log) Entries(ctx context.Context, brandID string, p records.ListParams) ([]Entry, string, error) {
	oldest := l.db.Now().Add(-Retention)
	return records.List(ctx, l.db, []records.Partition{{PK: keys.AuditPK(brandID)}}, p, func(e *Entry) bool {
		return e.At.After(oldest)
	})
}

// Changes describes what differs between two versions of a record, field
// by field as the API names them ("status active → paused, payoutCents 300
// → 350"), leaving out the fields in skip (times the change itself sets).
func Changes(before, after any, skip ...string) string {
	b, a := fields(before), fields(after)
	names := make([]string, 0, len(a))
	for name := range a {
		if !slices.Contains(skip, name) && !bytes.Equal(a[name], b[name]) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + " " + shown(b[name]) + " → " + shown(a[name])
	}
	return strings.Join(parts, ", ")
}

func fields(v any) map[string]json.RawMessage {
	var m map[string]json.RawMessage
	_ = json.Unmarshal(records.MustJSON(v), &m) // our own structs: an object
	return m
}

// shown is a JSON value as a person reads it: strings without quotes,
// null (and absent) as "none".
func shown(raw json.RawMessage) string {
	var s string
	switch {
	case len(raw) == 0 || string(raw) == "null":
		return "none"
	case json.Unmarshal(raw, &s) == nil:
		if s == "" {
			return "none"
		}
		return s
	}
	return string(raw)
}
