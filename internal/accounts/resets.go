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
)

// ResetTTL is how long a password reset link works.
const ResetTTL = time.Hour

// PasswordReset lets a user set a new password: made by an owner of the
// user's brand or by the tally command, it works once, for an hour, and
// only a hash of its token is stored.
type PasswordReset struct {
	ID        string     `json:"id"`
	BrandID   string     `json:"brandId"`
	UserID    string     `json:"userId"`
	Email     string     `json:"email"`
	CreatedAt tally.Time `json:"createdAt"`
	ExpiresAt tally.Time `json:"expiresAt"`
}

func (p PasswordReset) expiry() time.Time { return p.ExpiresAt.Time }

var errResetGone = tally.Errorf(tally.ECodeNotFound, "This password reset link has expired or was used already. Ask an owner of the brand for a new one.")

// CreateReset makes a password reset for a user of the brand and returns
// it with its token (shown this once).
func (s *Service) CreateReset(ctx context.Context, brandID, userID string) (PasswordReset, string, error) {
	u, err := s.userByID(ctx, brandID, userID)
	if err != nil {
		return PasswordReset{}, "", err
	}
	return s.createReset(ctx, u)
}

// CreateResetByEmail makes a password reset for the user with an e-mail
// address, of whichever brand (the tally command).
func (s *Service) CreateResetByEmail(ctx context.Context, email string) (PasswordReset, string, error) {
	email = strings.ToLower(strings.TrimSpace(email))
	u, err := records.Get[userRecord](ctx, s.db, keys.User(email))
	if errors.Is(err, store.ErrNotFound) {
		return PasswordReset{}, "", tally.Errorf(tally.ECodeNotFound, "No user has the e-mail address %s.", email)
	}
	if err != nil {
		return PasswordReset{}, "", err
	}
	return s.createReset(ctx, u)
}

func (s *Service) createReset(ctx context.Context, u userRecord) (PasswordReset, string, error) {
	token, err := NewToken()
	if err != nil {
		return PasswordReset{}, "", err
	}
	now := s.db.Now()
	r := PasswordReset{ID: ids.New("rst_", now), BrandID: u.BrandID, UserID: u.ID, Email: u.Email,
		CreatedAt: tally.NewTime(now), ExpiresAt: tally.NewTime(now.Add(ResetTTL))}
	err = s.db.Transact(ctx, append([]store.Op{store.Put(store.Item{
		Key:       keys.PasswordReset(identity.Hash(token)),
		Data:      records.MustJSON(r),
		ExpiresAt: r.ExpiresAt.Unix(),
	}, store.NotExists())}, audit.Record(ctx, u.BrandID, audit.PasswordResetCreated, u.ID, "reset link for "+u.Email, now)...)...)
	return r, token, err
}

// PendingReset returns the reset of a link's token, for its page; a used
// or expired one answers 404.
func (s *Service) PendingReset(ctx context.Context, token string) (PasswordReset, error) {
	r, _, err := byToken[PasswordReset](ctx, s, keys.PasswordReset, token, errResetGone)
	return r, err
}

// UseReset sets the user's new password and uses the reset up, in one
// transaction; every session the user had ends.
func (s *Service) UseReset(ctx context.Context, token, password string) (tally.User, error) {
	r, key, err := withPassword[PasswordReset](ctx, s, keys.PasswordReset, token, password, errResetGone)
	if err != nil {
		return tally.User{}, err
	}
	hash, err := s.passwords.Hash(password)
	if err != nil {
		return tally.User{}, err
	}
	var changed userRecord
	err = s.changeUser(ctx, r.BrandID, r.UserID, func(u userRecord, _ int) ([]store.Op, error) {
		u.PasswordHash, u.Epoch = hash, u.Epoch+1
		changed = u
		return []store.Op{
			store.Put(userItem(u), store.Exists()),
			store.Delete(key, store.Exists()),
			audit.Op(audit.User(u.ID, u.Email), u.BrandID, audit.PasswordReset, u.ID, u.Email+" set a new password", s.db.Now()),
		}, nil
	})
	if i, failed := store.FailedOp(err); failed && i == 2 {
		return tally.User{}, errResetGone
	}
	if tally.ErrorCode(err) == tally.ECodeNotFound {
		return tally.User{}, errResetGone // the user was removed since
	}
	return changed.User, err
}
