// Package ids makes the prefixed, time-sortable identifiers of DESIGN.md
// ("cnv_01jd…"): a prefix and a lowercase ULID, so that byte order is
// creation order.
package ids

import (
	"crypto/sha256"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
)

// New returns a fresh identifier with the given prefix (e.g. "cnv_") whose
// time component is t. Identifiers made in one process at the same
// millisecond still sort in creation order.
func New(prefix string, t time.Time) string {
	return string(Append(make([]byte, 0, len(prefix)+ulid.EncodedSize), prefix, t))
}

// Append appends a fresh identifier, as New makes it, to dst: a caller
// that draws identifiers until one suits it allocates only the one kept.
func Append(dst []byte, prefix string, t time.Time) []byte {
	var text [ulid.EncodedSize]byte
	_ = ulid.MustNew(ulid.Timestamp(t), ulid.DefaultEntropy()).MarshalTextTo(text[:]) // fails only on a shorter buffer
	for i, c := range text {
		if 'A' <= c && c <= 'Z' {
			text[i] = c + ('a' - 'A')
		}
	}
	return append(append(dst, prefix...), text[:]...)
}

// Derived returns the identifier with the prefix whose time component is t
// and whose random part comes from seed: the same for the same (t, seed),
// so a repeated step that makes it finds what it made before.
func Derived(prefix string, t time.Time, seed string) string {
	sum := sha256.Sum256([]byte(seed))
	var id ulid.ULID
	_ = id.SetTime(ulid.Timestamp(t)) // record times are far inside ULID's range
	copy(id[6:], sum[:10])
	return prefix + strings.ToLower(id.String())
}

// Floor returns the smallest identifier with the prefix made at or after t,
// and Ceil the largest made at or before t: bounds for a time range over a
// sorted list of identifiers.
func Floor(prefix string, t time.Time) string { return bound(prefix, t, 0x00) }

// Ceil: see Floor.
func Ceil(prefix string, t time.Time) string { return bound(prefix, t, 0xff) }

func bound(prefix string, t time.Time, fill byte) string {
	var id ulid.ULID
	if err := id.SetTime(ulid.Timestamp(t)); err != nil {
		// Outside ULID's range (after year 10889): clamp to the extremes.
		if fill == 0 {
			return prefix
		}
		return prefix + "~"
	}
	for i := 6; i < len(id); i++ {
		id[i] = fill
	}
	return prefix + strings.ToLower(id.String())
}

// Valid reports whether s is an identifier with the prefix.
func Valid(prefix, s string) bool {
	rest, ok := strings.CutPrefix(s, prefix)
	if !ok || len(rest) != ulid.EncodedSize {
		return false
	}
	_, err := ulid.ParseStrict(rest)
	return err == nil
}
