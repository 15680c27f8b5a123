package accounts

import (
	"crypto/rand"
	"encoding/base64"
	"sync"
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
