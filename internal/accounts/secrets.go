package accounts

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"sync"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// The parts of signing in that the dashboard's users and the partner
// portal's partners share (package portalaccess).

// CheckPassword checks a new password against the bounds every Tally
// password keeps, naming the field "password".
func CheckPassword(pw *string) error { return checkPassword(pw) }

// NewToken returns a fresh secret for a cookie or a link: 32 random
// bytes, base64url. Only its hash (identity.Hash) is stored.
func NewToken() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(raw), nil
}

// UnknownUserHash returns the hash a sign-in checks the password against
// when no one has the address, so that an unknown address takes as long to
// refuse as a wrong password. It is made on first use: hashing takes tens
// of milliseconds and 19 MB, which every function would otherwise pay at
// start, signing in or not.
func UnknownUserHash(passwords Passwords) func() string {
	return sync.OnceValue(func() string {
		h, err := passwords.Hash("no user has this password")
		if err != nil {
			panic(err) // crypto/rand does not fail on supported platforms
		}
		return h
	})
}

// Records found by the hash of a secret token (sessions, invitations):
// only the hash is stored, and each record lasts until it expires.

// TokenHash is the hash a token's record is stored under; ok is false for
// an empty or overlong token, which no record has.
func TokenHash(token string) (hash string, ok bool) {
	if token == "" || len(token) > 100 {
		return "", false
	}
	return identity.Hash(token), true
}

// PutSecret stores v at key (made from a token's hash) until expiresAt:
// the store's TTL deletes it after. The callers make the key, so that the
// partitions each function writes can be traced to its key builder.
func PutSecret(ctx context.Context, db *records.DB, key store.Key, v any, expiresAt tally.Time) error {
	return db.Transact(ctx, store.Put(store.Item{Key: key, Data: records.MustJSON(v), ExpiresAt: expiresAt.Unix()}, store.NotExists()))
}

// GetByToken reads the record of token under key(its hash) while
// expiresAt of it has not passed: found is false for an empty, overlong,
// unknown or expired token (the TTL deletes expired records lazily).
func GetByToken[T any](ctx context.Context, db *records.DB, key func(tokenHash string) store.Key, token string, expiresAt func(T) tally.Time) (v T, found bool, err error) {
	hash, ok := TokenHash(token)
	if !ok {
		return v, false, nil
	}
	v, err = records.Get[T](ctx, db, key(hash))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return v, false, nil
	case err != nil:
		return v, false, err
	}
	return v, db.Now().Before(expiresAt(v).Time), nil
}
