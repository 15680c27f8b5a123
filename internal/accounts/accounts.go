// Package accounts keeps the dashboard's users and their sessions:
// passwords hashed with Argon2id, sessions found by the hash of their
// token.
package accounts

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service keeps the users and their sessions, the team's invitations and
// password resets.
type Service struct {
	db        *records.DB
	brands    brands
	passwords Passwords
	// dummyHash is checked against when no user has the address
	// (UnknownUserHash).
	dummyHash func() string
}

// Passwords hashes passwords and checks them against their hashes
// (package password: Argon2id).
type Passwords interface {
	Hash(pw string) (string, error)
	Verify(hash, pw string) (bool, error)
}

// brands finds the brand a user belongs to.
type brands interface {
	Brand(ctx context.Context, brandID string) (tally.Brand, error)
}

// New returns the Service over db, whose users belong to brands, their
// passwords hashed by passwords.
func New(db *records.DB, b brands, passwords Passwords) *Service {
	return &Service{db: db, brands: b, passwords: passwords, dummyHash: UnknownUserHash(passwords)}
}

// Password length bounds, in characters: long enough for a passphrase to
// resist guessing (sign-in is throttled too), short enough that hashing
// cannot be made expensive by the input.
const (
	MinPasswordLen = 12
	maxPasswordLen = 256
)

// userRecord is the stored form of a user: the public fields, the hash,
// and the epoch of its sessions: a password reset moves it on, which
// ends every session begun before.
type userRecord struct {
	tally.User
	PasswordHash string `json:"passwordHash"`
	Epoch        int64  `json:"epoch,omitempty"`
}

// FromItem reads a user stored before roles existed as an owner: every
// user could change everything then.
func (r *userRecord) FromItem(store.Item) {
	if r.Role == "" {
		r.Role = tally.RoleOwner
	}
}

func userItem(u userRecord) store.Item {
	return store.Item{
		Key:  keys.User(u.Email),
		GSI1: store.IndexKey{PK: keys.UsersByBrand(u.BrandID), SK: u.ID},
		Data: records.MustJSON(u),
	}
}

// UserInput is the admin API's body for a new dashboard user.
type UserInput struct {
	BrandID  *string `json:"brandId"`
	Email    *string `json:"email"`
	Password *string `json:"password"`
}

// CreateUser makes a dashboard user of a brand, an owner. E-mail addresses
// are unique across brands (sign-in finds the brand by the address); a
// second user with the same address answers 409.
func (s *Service) CreateUser(ctx context.Context, in UserInput) (tally.User, error) {
	if in.Email != nil {
		e := strings.ToLower(strings.TrimSpace(*in.Email))
		in.Email = &e
	}
	if err := validate.First(validate.Text("brandId", in.BrandID, true, 64), validate.Email("email", in.Email), checkPassword(in.Password)); err != nil {
		return tally.User{}, err
	}
	if _, err := s.brands.Brand(ctx, *in.BrandID); err != nil {
		return tally.User{}, err
	}
	u, err := s.newUser(*in.BrandID, *in.Email, tally.RoleOwner, *in.Password)
	if err != nil {
		return tally.User{}, err
	}
	err = s.db.Transact(ctx, store.Put(userItem(u), store.NotExists()))
	if _, failed := store.FailedOp(err); failed {
		return tally.User{}, userExists(u.Email)
	}
	return u.User, err
}

// newUser is the record of a new user, its password hashed.
func (s *Service) newUser(brandID, email, role, pw string) (userRecord, error) {
	hash, err := s.passwords.Hash(pw)
	if err != nil {
		return userRecord{}, err
	}
	now := s.db.Now()
	return userRecord{User: tally.User{ID: ids.New("usr_", now), BrandID: brandID, Email: email, Role: role, CreatedAt: tally.NewTime(now)}, PasswordHash: hash}, nil
}

func userExists(email string) error {
	return tally.Errorf(tally.ECodeConflict, "A user with the email %s exists already.", email)
}

func checkPassword(pw *string) error {
	switch {
	case pw == nil || *pw == "":
		return validate.InvalidField("password", "password is required.")
	case utf8.RuneCountInString(*pw) < MinPasswordLen:
		return validate.InvalidField("password", "password must be at least %d characters.", MinPasswordLen)
	case utf8.RuneCountInString(*pw) > maxPasswordLen:
		return validate.InvalidField("password", "password must be at most %d characters.", maxPasswordLen)
	}
	return nil
}

// Users lists a brand's dashboard users, newest first.
func (s *Service) Users(ctx context.Context, brandID string, p records.ListParams) ([]tally.User, string, error) {
	recs, next, err := records.List[userRecord](ctx, s.db, []records.Partition{{Index: store.GSI1, PK: keys.UsersByBrand(brandID)}}, p, nil)
	users := make([]tally.User, len(recs))
	for i, r := range recs {
		users[i] = r.User
	}
	return users, next, err
}

// errSignIn is the one answer to any failed sign-in, so that it tells
// nothing about which addresses have users.
var errSignIn = tally.Errorf(tally.ECodeUnauthorized, "The email or password is not right.")

// SignIn checks a user's e-mail address and password. Throttling attempts
// is the caller's part (it knows the client's address).
func (s *Service) SignIn(ctx context.Context, emailAddr, pw string) (tally.User, error) {
	emailAddr = strings.ToLower(strings.TrimSpace(emailAddr))
	hash := s.dummyHash()
	u, err := tally.User{}, error(nil)
	if emailAddr != "" && len(emailAddr) <= 254 && len(pw) <= 4*maxPasswordLen {
		var rec userRecord
		rec, err = records.Get[userRecord](ctx, s.db, keys.User(emailAddr))
		switch {
		case err == nil:
			u, hash = rec.User, rec.PasswordHash
		case !errors.Is(err, store.ErrNotFound):
			return tally.User{}, err
		}
	}
	ok, verr := s.passwords.Verify(hash, pw)
	if verr != nil {
		return tally.User{}, verr
	}
	if !ok || u.ID == "" {
		return tally.User{}, errSignIn
	}
	return u, nil
}

// SessionTTL is how long a dashboard session lasts after sign-in.
const SessionTTL = 12 * time.Hour

// Session is a signed-in user's server-side session. Only a hash of its
// token is stored; the token itself lives in the user's cookie.
type Session struct {
	UserID    string     `json:"userId"`
	BrandID   string     `json:"brandId"`
	BrandName string     `json:"brandName"`
	Email     string     `json:"email"`
	CreatedAt tally.Time `json:"createdAt"`
	ExpiresAt tally.Time `json:"expiresAt"`
	// Epoch is the user's epoch when the session began: a password reset
	// since ends it.
	Epoch int64 `json:"epoch,omitempty"`
	// Role is the user's role as it is now (read with the session, not
	// kept in it, so a change of role is in force at once).
	Role string `json:"-"`
}

// CanChange reports whether the session's user may change anything: only
// owners may.
func (s Session) CanChange() bool { return s.Role == tally.RoleOwner }

// StartSession makes a session for u and returns its token.
func (s *Service) StartSession(ctx context.Context, u tally.User) (string, Session, error) {
	token, err := NewToken()
	if err != nil {
		return "", Session{}, err
	}
	b, err := s.brands.Brand(ctx, u.BrandID)
	if err != nil {
		return "", Session{}, err
	}
	rec, err := records.Get[userRecord](ctx, s.db, keys.User(u.Email))
	if err != nil {
		return "", Session{}, err
	}
	now := s.db.Now()
	sess := Session{UserID: u.ID, BrandID: u.BrandID, BrandName: b.Name, Email: u.Email, CreatedAt: tally.NewTime(now), ExpiresAt: tally.NewTime(now.Add(SessionTTL)),
		Epoch: rec.Epoch, Role: rec.Role}
	err = PutSecret(ctx, s.db, keys.Session(identity.Hash(token)), sess, sess.ExpiresAt)
	return token, sess, err
}

// errNoSession answers a missing, unknown, expired or ended session.
var errNoSession = tally.Errorf(tally.ECodeUnauthorized, "Sign in to continue.")

// Session returns the live session of a token, with its user's role. A
// session whose user was removed, or whose password was reset since it
// began, has ended.
func (s *Service) Session(ctx context.Context, token string) (Session, error) {
	sess, found, err := GetByToken(ctx, s.db, keys.Session, token, func(s Session) tally.Time { return s.ExpiresAt })
	switch {
	case err != nil:
		return Session{}, err
	case !found:
		return Session{}, errNoSession
	}
	u, err := records.Get[userRecord](ctx, s.db, keys.User(sess.Email))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Session{}, errNoSession
	case err != nil:
		return Session{}, err
	case u.ID != sess.UserID || u.Epoch != sess.Epoch:
		return Session{}, errNoSession
	}
	sess.Role = u.Role
	return sess, nil
}

// EndSession signs a session out; ending an unknown one is not an error.
func (s *Service) EndSession(ctx context.Context, token string) error {
	hash, ok := TokenHash(token)
	if !ok {
		return nil
	}
	return s.db.Transact(ctx, store.Delete(keys.Session(hash)))
}
