// Package password hashes dashboard passwords with Argon2id (RFC 9106), a
// memory-hard function, and checks passwords against those hashes. Hashes
// are PHC strings ($argon2id$v=19$m=…,t=…,p=…$salt$hash) that carry their
// own parameters, so the parameters can grow without breaking old hashes.
package password

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/argon2"
)

// Parameters of new hashes: OWASP's Argon2id recommendation (19 MiB of
// memory, 2 passes, 1 lane), which a 256 MB Lambda hashes in tens of
// milliseconds.
const (
	memoryKiB = 19 * 1024
	passes    = 2
	lanes     = 1
	saltLen   = 16
	keyLen    = 32
)

// Hash returns the encoded Argon2id hash of pw with a fresh random salt.
func Hash(pw string) (string, error) {
	salt := make([]byte, saltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	sum := argon2.IDKey([]byte(pw), salt, passes, memoryKiB, lanes, keyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, memoryKiB, passes, lanes,
		b64.EncodeToString(salt), b64.EncodeToString(sum)), nil
}

// ErrMalformed is returned for an encoded hash this package cannot read.
var ErrMalformed = errors.New("password: malformed hash")

// Verify reports whether pw matches the encoded hash, comparing in
// constant time.
func Verify(encoded, pw string) (bool, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return false, ErrMalformed
	}
	var version int
	var memory, time uint32
	var threads uint8
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return false, ErrMalformed
	}
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &memory, &time, &threads); err != nil ||
		memory == 0 || memory > 1<<20 || time == 0 || time > 16 || threads == 0 {
		return false, ErrMalformed
	}
	b64 := base64.RawStdEncoding
	salt, err := b64.DecodeString(parts[4])
	if err != nil {
		return false, ErrMalformed
	}
	want, err := b64.DecodeString(parts[5])
	if err != nil || len(want) == 0 {
		return false, ErrMalformed
	}
	got := argon2.IDKey([]byte(pw), salt, time, memory, threads, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// Argon2id is Hash and Verify as accounts.Passwords.
type Argon2id struct{}

func (Argon2id) Hash(pw string) (string, error)          { return Hash(pw) }
func (Argon2id) Verify(encoded, pw string) (bool, error) { return Verify(encoded, pw) }
