// Package secretbox seals webhook signing secrets for storage: AES-256-GCM
// under one data key per deployment (envelope encryption), with the key of
// the item that holds a secret as associated data, so a sealed secret opens
// only in the item it was sealed for. The data key is kept wrapped in the
// store (keys.SecretKey) by a Wrapper: KMS on AWS, nothing on the local
// server (Unwrapped). A stored value without the sealed prefix is a secret
// written in clear before sealing existed, and reads as it is.
package secretbox

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// prefix starts every sealed secret: the format's version (1: AES-256-GCM
// under the deployment's data key, a 12-byte nonce in front).
const prefix = "tsb1:"

// KeyRefresh is how long a process uses the data key it unwrapped before
// unwrapping it again: a disabled KMS key stops secrets opening within it.
const KeyRefresh = 15 * time.Minute

// Wrapper makes and unwraps data keys: KMS on AWS (package awskms).
type Wrapper interface {
	// GenerateDataKey makes a 32-byte data key, returned clear and wrapped.
	GenerateDataKey(ctx context.Context) (plain, wrapped []byte, err error)
	// Decrypt unwraps a data key GenerateDataKey made.
	Decrypt(ctx context.Context, wrapped []byte) ([]byte, error)
}

// Unwrapped is the local server's Wrapper: the data key is kept in clear in
// the store next to the secrets it seals. A copy of the store reads them;
// it keeps one code path, and the local server has no key service.
type Unwrapped struct{}

func (Unwrapped) GenerateDataKey(context.Context) (plain, wrapped []byte, err error) {
	key := make([]byte, 32)
	_, _ = rand.Read(key) // crypto/rand.Read never fails
	return key, key, nil
}

func (Unwrapped) Decrypt(_ context.Context, wrapped []byte) ([]byte, error) { return wrapped, nil }

// Box seals and opens secrets under the deployment's data key, kept in st
// and wrapped by w. It is safe for concurrent use.
type Box struct {
	st    store.Store
	w     Wrapper
	clock func() time.Time

	mu     sync.Mutex
	aead   cipher.AEAD
	loaded time.Time
}

// New returns the Box whose data key st keeps, wrapped by w.
func New(st store.Store, w Wrapper) *Box {
	return &Box{st: st, w: w, clock: time.Now}
}

// Seal seals secret for the item at key; "" (no secret) stays "".
func (b *Box) Seal(ctx context.Context, secret string, key store.Key) (string, error) {
	if secret == "" {
		return "", nil
	}
	aead, err := b.key(ctx)
	if err != nil {
		return "", err
	}
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(secret)+aead.Overhead())
	_, _ = rand.Read(nonce)
	sealed := aead.Seal(nonce, nonce, []byte(secret), associated(key))
	return prefix + base64.RawStdEncoding.EncodeToString(sealed), nil
}

// ErrOpen means a sealed secret does not open: it was sealed for another
// item or under another data key, or changed since.
var ErrOpen = errors.New("secretbox: sealed secret does not open")

// Open returns the secret stored as stored in the item at key: opened when
// sealed, as it is when written in clear before sealing existed.
func (b *Box) Open(ctx context.Context, stored string, key store.Key) (string, error) {
	body, sealed := strings.CutPrefix(stored, prefix)
	if !sealed {
		return stored, nil
	}
	raw, err := base64.RawStdEncoding.DecodeString(body)
	if err != nil {
		return "", ErrOpen
	}
	aead, err := b.key(ctx)
	if err != nil {
		return "", err
	}
	if len(raw) < aead.NonceSize() {
		return "", ErrOpen
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], associated(key))
	if err != nil {
		return "", ErrOpen
	}
	return string(plain), nil
}

// errNoKey is what a nil Box answers: the function was given no key, as
// those that neither sign nor set secrets are not.
var errNoKey = errors.New("secretbox: no data key here: this process neither signs nor sets signing secrets")

// associated binds a sealed secret to its item.
func associated(key store.Key) []byte { return []byte(key.PK + "\x00" + key.SK) }

// key is the data key's cipher, unwrapped at most once per KeyRefresh.
func (b *Box) key(ctx context.Context) (cipher.AEAD, error) {
	if b == nil {
		return nil, errNoKey
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.clock()
	if b.aead != nil && now.Sub(b.loaded) < KeyRefresh {
		return b.aead, nil
	}
	plain, err := b.dataKey(ctx)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(plain)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	b.aead, b.loaded = aead, now
	return aead, nil
}

// dataKey reads and unwraps the data key, making it on first need: of
// processes racing to make it, the first conditional put wins and the
// others read the winner's.
func (b *Box) dataKey(ctx context.Context) ([]byte, error) {
	for range 2 {
		it, err := b.st.Get(ctx, keys.SecretKey())
		if err == nil {
			return b.w.Decrypt(ctx, it.Bins["wrapped"])
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		plain, wrapped, err := b.w.GenerateDataKey(ctx)
		if err != nil {
			return nil, err
		}
		err = b.st.Transact(ctx, store.Put(store.Item{Key: keys.SecretKey(), Bins: map[string][]byte{"wrapped": wrapped}}, store.NotExists()))
		if _, raced := store.FailedOp(err); !raced {
			return plain, err
		}
	}
	return nil, errors.New("secretbox: data key neither read nor made")
}
