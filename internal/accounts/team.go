package accounts

import (
	"context"
	"errors"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// A brand's team: its users' roles, removing users, and the owners who
// must remain. Every change to an existing user (a role, a removal, a
// password reset) bumps the brand's team item under a condition on the
// revision read, so changes run one at a time per brand and none is lost
// or lets the last owner go.

// MaxTeam bounds a brand's users, so that counting its owners reads a
// bounded number of items.
const MaxTeam = 100

// checkRole validates a role field.
func checkRole(role *string) error {
	return validate.First(validate.Required("role", role != nil && *role != ""), validate.OneOf("role", role, tally.RoleOwner, tally.RoleViewer))
}

// User returns one of a brand's users; another brand's answers 404.
func (s *Service) User(ctx context.Context, brandID, userID string) (tally.User, error) {
	rec, err := s.userByID(ctx, brandID, userID)
	return rec.User, err
}

// userByID finds a brand's user by id: the brand's index names its e-mail
// address, whose item is read for what it holds now.
func (s *Service) userByID(ctx context.Context, brandID, userID string) (userRecord, error) {
	if !ids.Valid("usr_", userID) {
		return userRecord{}, records.NotFound(store.ErrNotFound, "user", userID)
	}
	page, err := s.db.Query(ctx, store.Query{Index: store.GSI1, PK: keys.UsersByBrand(brandID), SKFrom: userID, SKTo: userID, Limit: 1})
	if err != nil {
		return userRecord{}, err
	}
	if len(page.Items) == 0 {
		return userRecord{}, records.NotFound(store.ErrNotFound, "user", userID)
	}
	var listed userRecord
	if err := records.Decode(page.Items[0], &listed); err != nil {
		return userRecord{}, err
	}
	rec, err := records.Get[userRecord](ctx, s.db, keys.User(listed.Email))
	if errors.Is(err, store.ErrNotFound) || err == nil && rec.ID != userID {
		return userRecord{}, records.NotFound(store.ErrNotFound, "user", userID)
	}
	return rec, err
}

// SetRole changes a user's role. The brand's last owner cannot become a
// viewer (409).
func (s *Service) SetRole(ctx context.Context, brandID, userID, role string) (tally.User, error) {
	if err := checkRole(&role); err != nil {
		return tally.User{}, err
	}
	var changed userRecord
	err := s.changeUser(ctx, brandID, userID, func(u userRecord, otherOwners int) ([]store.Op, error) {
		if u.Role == role {
			changed = u
			return nil, nil
		}
		if u.Role == tally.RoleOwner && otherOwners == 0 {
			return nil, lastOwner(u.Email, "a viewer")
		}
		previous := u.Role
		u.Role = role
		changed = u
		return append([]store.Op{store.Put(userItem(u), store.Exists())},
			audit.Record(ctx, brandID, audit.UserRoleChanged, u.ID, u.Email+": "+previous+" → "+role, s.db.Now())...), nil
	})
	return changed.User, err
}

// RemoveUser deletes a user of the brand; its sessions end with it. The
// brand's last owner cannot be removed (409).
func (s *Service) RemoveUser(ctx context.Context, brandID, userID string) (tally.User, error) {
	var removed userRecord
	err := s.changeUser(ctx, brandID, userID, func(u userRecord, otherOwners int) ([]store.Op, error) {
		if u.Role == tally.RoleOwner && otherOwners == 0 {
			return nil, lastOwner(u.Email, "removed")
		}
		removed = u
		return append([]store.Op{store.Delete(keys.User(u.Email), store.Exists())},
			audit.Record(ctx, brandID, audit.UserRemoved, u.ID, u.Email+" ("+u.Role+")", s.db.Now())...), nil
	})
	return removed.User, err
}

func lastOwner(email, what string) error {
	if what == "removed" {
		return tally.Errorf(tally.ECodeConflict, "%s is the brand's only owner and cannot be removed: make another user an owner first.", email)
	}
	return tally.Errorf(tally.ECodeConflict, "%s is the brand's only owner and cannot become %s: make another user an owner first.", email, what)
}

// changeUser reads a user of the brand and how many other owners the
// brand has, and writes the operations change returns (none: nothing to
// write; the first one writes the user) with the team item's next
// revision, reading again when another change of the team came first. A
// failed condition of a later operation is the caller's to answer.
func (s *Service) changeUser(ctx context.Context, brandID, userID string, change func(u userRecord, otherOwners int) ([]store.Op, error)) error {
	for {
		team, err := s.db.Get(ctx, keys.Team(brandID))
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return err
		}
		rev := team.Nums["rev"]
		u, err := s.userByID(ctx, brandID, userID)
		if err != nil {
			return err
		}
		owners, err := s.owners(ctx, brandID)
		if err != nil {
			return err
		}
		others := owners
		if u.Role == tally.RoleOwner {
			others--
		}
		ops, err := change(u, others)
		if err != nil || len(ops) == 0 {
			return err
		}
		err = s.db.Transact(ctx, append([]store.Op{store.Increment(keys.Team(brandID), map[string]int64{"rev": 1}, store.NumEquals("rev", rev))}, ops...)...)
		if i, failed := store.FailedOp(err); failed && i <= 1 {
			continue // another change of the team came first, or the user is gone
		}
		return err
	}
}

// owners counts the brand's owners. The brand's index may lag a write
// (DynamoDB's indexes are eventually consistent): each user it lists is
// read from its item, so a user just removed or demoted is not counted,
// and one just added can only be missed, which errs on the side of
// keeping an owner.
func (s *Service) owners(ctx context.Context, brandID string) (int, error) {
	page, err := s.db.Query(ctx, store.Query{Index: store.GSI1, PK: keys.UsersByBrand(brandID), Limit: MaxTeam})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, it := range page.Items {
		var listed userRecord
		if err := records.Decode(it, &listed); err != nil {
			return 0, err
		}
		u, err := records.Get[userRecord](ctx, s.db, keys.User(listed.Email))
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return 0, err
		case u.ID == listed.ID && u.BrandID == brandID && u.Role == tally.RoleOwner:
			n++
		}
	}
	return n, nil
}

// expiring is a record found by the hash of a token, good until it
// expires (an invitation, a password reset).
type expiring interface{ expiry() time.Time }

// withPassword reads the live record of a token whose form sets password,
// and checks the password.
func withPassword[T expiring](ctx context.Context, s *Service, key func(hash string) store.Key, token, password string, gone error) (T, store.Key, error) {
	v, k, err := byToken[T](ctx, s, key, token, gone)
	if err == nil {
		err = checkPassword(&password)
	}
	return v, k, err
}

// byToken reads the live record of a token: a token that is unknown,
// used or expired is gone.
func byToken[T expiring](ctx context.Context, s *Service, key func(hash string) store.Key, token string, gone error) (T, store.Key, error) {
	var zero T
	v, found, err := GetByToken(ctx, s.db, key, token, func(v T) tally.Time { return tally.Time{Time: v.expiry()} })
	switch {
	case err != nil:
		return zero, store.Key{}, err
	case !found:
		return zero, store.Key{}, gone
	}
	hash, _ := TokenHash(token)
	return v, key(hash), nil
}
