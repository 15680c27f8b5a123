package accounts

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// InvitationTTL is how long an invitation's link works.
const InvitationTTL = 7 * 24 * time.Hour

// Invitation asks someone to join a brand's team with a role. Its link
// holds a token of which only a hash is stored; it works once, for 7 days.
type Invitation struct {
	ID        string     `json:"id"`
	BrandID   string     `json:"brandId"`
	BrandName string     `json:"brandName"`
	Email     string     `json:"email"`
	Role      string     `json:"role"`
	InvitedBy string     `json:"invitedBy"` // the inviting owner's e-mail address
	CreatedAt tally.Time `json:"createdAt"`
	ExpiresAt tally.Time `json:"expiresAt"`
}

func (i Invitation) expiry() time.Time { return i.ExpiresAt.Time }

// InvitationInput is the form of a new invitation.
type InvitationInput struct {
	Email *string `json:"email"`
	Role  *string `json:"role"`
}

// errInvitationGone answers an invitation link that is unknown, used,
// revoked or expired: the same for all, as the link is a secret.
var errInvitationGone = tally.Errorf(tally.ECodeNotFound, "This invitation link has expired, was used already or was withdrawn. Ask an owner of the brand for a new one.")

// Invite makes an invitation of brandID's, from the owner with the
// e-mail address by, and returns it with its token (shown this once).
func (s *Service) Invite(ctx context.Context, brandID, by string, in InvitationInput) (Invitation, string, error) {
	if in.Email != nil {
		e := strings.ToLower(strings.TrimSpace(*in.Email))
		in.Email = &e
	}
	if err := validate.First(validate.Email("email", in.Email), checkRole(in.Role)); err != nil {
		return Invitation{}, "", err
	}
	switch _, err := records.Get[userRecord](ctx, s.db, keys.User(*in.Email)); {
	case err == nil:
		return Invitation{}, "", userExists(*in.Email)
	case !errors.Is(err, store.ErrNotFound):
		return Invitation{}, "", err
	}
	// Pending invitations count: each can become a user without another
	// check when it is accepted.
	page, err := s.db.Query(ctx, store.Query{Index: store.GSI1, PK: keys.UsersByBrand(brandID), Limit: MaxTeam})
	if err != nil {
		return Invitation{}, "", err
	}
	pending, err := s.Invitations(ctx, brandID)
	if err != nil {
		return Invitation{}, "", err
	}
	if len(page.Items)+len(pending) >= MaxTeam {
		return Invitation{}, "", tally.Errorf(tally.ECodeConflict, "A brand has at most %d users, pending invitations included; remove a user or withdraw an invitation first.", MaxTeam)
	}
	b, err := s.brands.Brand(ctx, brandID)
	if err != nil {
		return Invitation{}, "", err
	}
	token, err := NewToken()
	if err != nil {
		return Invitation{}, "", err
	}
	now := s.db.Now()
	inv := Invitation{ID: ids.New("inv_", now), BrandID: brandID, BrandName: b.Name, Email: *in.Email, Role: *in.Role, InvitedBy: by,
		CreatedAt: tally.NewTime(now), ExpiresAt: tally.NewTime(now.Add(InvitationTTL))}
	err = s.db.Transact(ctx, append([]store.Op{store.Put(store.Item{
		Key:       keys.Invitation(identity.Hash(token)),
		GSI1:      store.IndexKey{PK: keys.InvitationsByBrand(brandID), SK: inv.ID},
		Data:      records.MustJSON(inv),
		ExpiresAt: inv.ExpiresAt.Unix(),
	}, store.NotExists())}, audit.Record(ctx, brandID, audit.UserInvited, inv.ID, inv.Email+" as "+inv.Role, now)...)...)
	return inv, token, err
}

// Invitations lists the brand's pending invitations, newest first.
func (s *Service) Invitations(ctx context.Context, brandID string) ([]Invitation, error) {
	now := s.db.Now()
	invs, _, err := records.List(ctx, s.db, []records.Partition{{Index: store.GSI1, PK: keys.InvitationsByBrand(brandID)}},
		records.ListParams{Limit: records.MaxLimit}, func(i *Invitation) bool { return now.Before(i.ExpiresAt.Time) })
	return invs, err
}

// RevokeInvitation withdraws a pending invitation of the brand: its link
// stops working.
func (s *Service) RevokeInvitation(ctx context.Context, brandID, invitationID string) (Invitation, error) {
	missing := records.NotFound(store.ErrNotFound, "invitation", invitationID)
	if !ids.Valid("inv_", invitationID) {
		return Invitation{}, missing
	}
	page, err := s.db.Query(ctx, store.Query{Index: store.GSI1, PK: keys.InvitationsByBrand(brandID), SKFrom: invitationID, SKTo: invitationID, Limit: 1})
	if err != nil {
		return Invitation{}, err
	}
	if len(page.Items) == 0 {
		return Invitation{}, missing
	}
	var inv Invitation
	if err := records.Decode(page.Items[0], &inv); err != nil {
		return Invitation{}, err
	}
	err = s.db.Transact(ctx, append([]store.Op{store.Delete(page.Items[0].Key, store.Exists())},
		audit.Record(ctx, brandID, audit.InvitationRevoked, inv.ID, inv.Email+" as "+inv.Role, s.db.Now())...)...)
	if _, failed := store.FailedOp(err); failed {
		return Invitation{}, missing // accepted or revoked meanwhile
	}
	return inv, err
}

// PendingInvitation returns the invitation of a link's token, for its
// page; a used, revoked or expired one answers 404.
func (s *Service) PendingInvitation(ctx context.Context, token string) (Invitation, error) {
	inv, _, err := byToken[Invitation](ctx, s, keys.Invitation, token, errInvitationGone)
	return inv, err
}

// AcceptInvitation makes the invited user with the password chosen, and
// uses the invitation up, in one transaction: of two acceptances at once,
// one makes the user.
func (s *Service) AcceptInvitation(ctx context.Context, token, password string) (tally.User, error) {
	inv, key, err := withPassword[Invitation](ctx, s, keys.Invitation, token, password, errInvitationGone)
	if err != nil {
		return tally.User{}, err
	}
	u, err := s.newUser(inv.BrandID, inv.Email, inv.Role, password)
	if err != nil {
		return tally.User{}, err
	}
	err = s.db.Transact(ctx,
		store.Delete(key, store.Exists()),
		store.Put(userItem(u), store.NotExists()),
		audit.Op(audit.User(u.ID, u.Email), inv.BrandID, audit.UserJoined, u.ID, u.Email+" joined as "+u.Role+", invited by "+inv.InvitedBy, u.CreatedAt.Time))
	switch i, failed := store.FailedOp(err); {
	case failed && i == 0:
		return tally.User{}, errInvitationGone
	case failed:
		return tally.User{}, userExists(u.Email)
	}
	return u.User, err
}
