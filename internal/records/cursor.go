package records

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// List cursors are signed with HMAC-SHA256 under a secret of the
// deployment, over the cursor's content and the query it continues (the
// partitions, built from the caller's brand, the bounds and the filters).
// A client can neither make one up nor change one, nor use one for another
// brand's list or other filters; and every value in one is checked again
// when it comes back, as if it could have been.
//
// The secrets are a keyring kept in the store itself, so every instance
// sharing the store (every Lambda on the table) uses the same ones with
// nothing to configure, and rotates them by itself: the newest key signs
// for cursorKeySigns, then only verifies for a week more, so a cursor keeps
// working at least a week after it was handed out, rotation or not.
const (
	cursorKeySigns    = 30 * 24 * time.Hour
	cursorKeyVerifies = cursorKeySigns + 7*24*time.Hour
	// cursorKeyringTTL is how long an instance trusts its copy of the
	// keyring; it sees another instance's rotation within it, and asks
	// again at once (but at most every cursorKeyRefresh) for a key it has
	// not seen.
	cursorKeyringTTL = 5 * time.Minute
	cursorKeyRefresh = 10 * time.Second
	// maxCursorLen bounds what is decoded at all.
	maxCursorLen = 4096
	// maxSortKeyLen bounds a sort key in a cursor: the lists' keys are
	// short identifiers with a prefix (DynamoDB refuses keys over 1,024
	// bytes, with an error that would be a 500).
	maxSortKeyLen = 256
)

type cursorKey struct {
	ID        string     `json:"id"`
	Secret    []byte     `json:"secret"`
	CreatedAt tally.Time `json:"createdAt"`
}

// cursorKeyring is the stored keyring, newest key first.
type cursorKeyring struct {
	Keys []cursorKey `json:"keys"`
}

type keyringCache struct {
	mu     sync.Mutex
	ring   cursorKeyring
	loaded time.Time
}

// cursorKeyring returns the keyring, from this instance's copy while it is
// fresh; fresher makes it read the store unless it did a moment ago.
func (db *DB) cursorKeyring(ctx context.Context, fresher bool) (cursorKeyring, error) {
	c := &db.cursorKeys
	c.mu.Lock()
	defer c.mu.Unlock()
	now := db.clock()
	if age := now.Sub(c.loaded); !c.loaded.IsZero() && age < cursorKeyringTTL && (!fresher || age < cursorKeyRefresh) {
		return c.ring, nil
	}
	ring, err := db.loadCursorKeyring(ctx, now)
	if err != nil {
		return cursorKeyring{}, err
	}
	c.ring, c.loaded = ring, now
	return ring, nil
}

// loadCursorKeyring reads the keyring and, when its newest key is due (or
// there is none yet), adds a key and drops those past verifying. The write
// holds only if no other instance changed the keyring meanwhile; if one
// did, its keyring is read instead.
func (db *DB) loadCursorKeyring(ctx context.Context, now time.Time) (cursorKeyring, error) {
	for range 5 {
		var ring cursorKeyring
		cond, version := store.NotExists(), 0
		item, err := db.Store.Get(ctx, keys.CursorKeyring())
		switch {
		case errors.Is(err, store.ErrNotFound):
		case err != nil:
			return ring, err
		default:
			if err := Decode(item, &ring); err != nil {
				return ring, err
			}
			cond = store.AttrEquals("version", item.Attrs["version"])
			version, _ = strconv.Atoi(item.Attrs["version"])
		}
		if len(ring.Keys) > 0 && now.Sub(ring.Keys[0].CreatedAt.Time) < cursorKeySigns {
			return ring, nil
		}
		next, err := rotateCursorKeys(ring, now)
		if err != nil {
			return ring, err
		}
		err = db.Transact(ctx, store.Put(store.Item{
			Key:   keys.CursorKeyring(),
			Attrs: map[string]string{"version": strconv.Itoa(version + 1)},
			Data:  MustJSON(next),
		}, cond))
		if _, raced := store.FailedOp(err); !raced {
			return next, err
		}
	}
	return cursorKeyring{}, errors.New("cursor keyring: too many concurrent rotations")
}

// rotateCursorKeys puts a new key in front and drops keys past verifying.
func rotateCursorKeys(ring cursorKeyring, now time.Time) (cursorKeyring, error) {
	id, secret := make([]byte, 4), make([]byte, 32)
	if _, err := rand.Read(id); err != nil {
		return ring, err
	}
	if _, err := rand.Read(secret); err != nil {
		return ring, err
	}
	next := cursorKeyring{Keys: []cursorKey{{ID: hex.EncodeToString(id), Secret: secret, CreatedAt: tally.NewTime(now)}}}
	for _, k := range ring.Keys {
		if now.Sub(k.CreatedAt.Time) < cursorKeyVerifies {
			next.Keys = append(next.Keys, k)
		}
	}
	return next, nil
}

// verifyingKey finds the key a cursor names, if it may still verify.
func (db *DB) verifyingKey(ctx context.Context, id string) (cursorKey, bool, error) {
	for _, fresher := range []bool{false, true} {
		ring, err := db.cursorKeyring(ctx, fresher)
		if err != nil {
			return cursorKey{}, false, err
		}
		for _, k := range ring.Keys {
			if k.ID == id {
				return k, db.clock().Sub(k.CreatedAt.Time) < cursorKeyVerifies, nil
			}
		}
	}
	return cursorKey{}, false, nil
}

// listCursor is the position in each partition of a span: the last sort
// key handed out, and whether the partition is exhausted.
type listCursor struct {
	Key  string   `json:"k"` // the signing key's id
	Last []string `json:"l"`
	Done []bool   `json:"d"`
}

// sealCursor encodes c for the client: its JSON and its signature, each
// base64url, joined by a dot.
func (db *DB) sealCursor(ctx context.Context, sp Span, c listCursor) (string, error) {
	ring, err := db.cursorKeyring(ctx, false)
	if err != nil {
		return "", err
	}
	key := ring.Keys[0]
	c.Key = key.ID
	payload := MustJSON(c)
	enc := base64.RawURLEncoding
	return enc.EncodeToString(payload) + "." + enc.EncodeToString(cursorMAC(key.Secret, sp, payload)), nil
}

// openCursor checks a cursor from the client against the span it is used
// with and returns its position.
func (db *DB) openCursor(ctx context.Context, sp Span, token string) (listCursor, error) {
	enc := base64.RawURLEncoding
	p64, m64, ok := strings.Cut(token, ".")
	if !ok || len(token) > maxCursorLen {
		return listCursor{}, invalidCursor()
	}
	payload, err1 := enc.DecodeString(p64)
	mac, err2 := enc.DecodeString(m64)
	var c listCursor
	if err1 != nil || err2 != nil || json.Unmarshal(payload, &c) != nil {
		return listCursor{}, invalidCursor()
	}
	key, valid, err := db.verifyingKey(ctx, c.Key)
	switch {
	case err != nil:
		return listCursor{}, err
	case key.ID == "" || !hmac.Equal(mac, cursorMAC(key.Secret, sp, payload)):
		return listCursor{}, invalidCursor()
	case !valid:
		return listCursor{}, tally.Errorf(tally.ECodeValidation, "cursor has expired; start the list again without it.")
	case !sp.validPosition(c):
		return listCursor{}, invalidCursor()
	}
	return c, nil
}

// cursorMAC signs a cursor's payload together with the query it continues,
// truncated to 128 bits.
func cursorMAC(secret []byte, sp Span, payload []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tally list cursor v1\x00"))
	for _, p := range sp.Parts {
		m.Write([]byte(string(p.Index) + "\x00" + p.PK + "\x00"))
	}
	m.Write([]byte(sp.Prefix + "\x00" + sp.From + "\x00" + sp.To + "\x00" + sp.Filter + "\x00"))
	m.Write(payload)
	return m.Sum(nil)[:16]
}

// validPosition reports whether c is a position the list over sp could
// have handed out: one entry per partition, each either empty or a sort key
// in the span's range, short and printable.
func (sp Span) validPosition(c listCursor) bool {
	if len(c.Last) != len(sp.Parts) || len(c.Done) != len(sp.Parts) {
		return false
	}
	for _, last := range c.Last {
		if last == "" {
			continue
		}
		rest, ok := strings.CutPrefix(last, sp.Prefix)
		if !ok || len(last) > maxSortKeyLen || strings.IndexFunc(last, func(r rune) bool { return r <= ' ' || r > '~' }) >= 0 ||
			sp.From != "" && rest < sp.From || sp.To != "" && rest > sp.To {
			return false
		}
	}
	return true
}

func invalidCursor() error {
	return tally.Errorf(tally.ECodeValidation, "cursor is not valid for this list; start again without it.")
}
