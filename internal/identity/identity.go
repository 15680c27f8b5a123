// Package identity says who a request acts for: brands, their API keys
// and their postback tokens. Keys and tokens are stored as hashes of their
// secrets, which are shown once, when made.
package identity

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service keeps the brands and their credentials.
type Service struct {
	db *records.DB
	// apiKeys and postbackTokens are credentials by the hash of their
	// secret; a revocation reaches other instances within their TTL.
	apiKeys        *records.Cache[apiKeyRecord]
	postbackTokens *records.Cache[postbackTokenRecord]
	// unknownKeys remembers secrets that match no key for a few seconds,
	// so a client repeating a wrong key costs no read per request.
	unknownKeys *records.Cache[struct{}]
	// notingKeys holds the hashes of keys whose lastUsedAt this instance
	// is writing, so that concurrent requests write it once.
	notingKeys sync.Map
}

// unknownKeyTTL is how long an instance takes a secret that matched no key
// as unknown. A key is created before it is handed out, so this only delays
// a key that a client guessed right before it existed.
const unknownKeyTTL = 5 * time.Second

// New returns the Service over db. An instance trusts the credentials it
// read for cacheTTL: a revoked key keeps working on another instance for
// at most that long.
func New(db *records.DB, cacheTTL time.Duration) *Service {
	return &Service{
		db:             db,
		apiKeys:        records.NewCache[apiKeyRecord](cacheTTL, db.Clock),
		postbackTokens: records.NewCache[postbackTokenRecord](cacheTTL, db.Clock),
		unknownKeys:    records.NewCache[struct{}](min(cacheTTL, unknownKeyTTL), db.Clock),
	}
}

// secretPrefix starts every API key secret, so leaked keys are easy to spot
// in code and logs.
const secretPrefix = "tally_sk_"

// CreateBrand creates a tenant.
func (s *Service) CreateBrand(ctx context.Context, name string) (tally.Brand, error) {
	if err := validate.Text("name", &name, true, 200); err != nil {
		return tally.Brand{}, err
	}
	name = strings.TrimSpace(name)
	now := s.db.Now()
	b := tally.Brand{ID: ids.New("brd_", now), Name: name, Timezone: "UTC", CreatedAt: tally.NewTime(now)}
	err := s.db.Transact(ctx, store.Put(brandItem(b), store.NotExists()))
	return b, err
}

func brandItem(b tally.Brand) store.Item {
	return store.Item{Key: keys.Brand(b.ID), GSI1: store.IndexKey{PK: keys.Brands, SK: b.ID}, Data: records.MustJSON(b)}
}

// Brands lists the brands, newest first (the admin API).
func (s *Service) Brands(ctx context.Context, p records.ListParams) ([]tally.Brand, string, error) {
	bs, next, err := records.List[tally.Brand](ctx, s.db, []records.Partition{{Index: store.GSI1, PK: keys.Brands}}, p, nil)
	for i := range bs {
		bs[i].Timezone = cmp.Or(bs[i].Timezone, "UTC")
	}
	return bs, next, err
}

// Brand returns a brand.
func (s *Service) Brand(ctx context.Context, brandID string) (tally.Brand, error) {
	if !ids.Valid("brd_", brandID) {
		return tally.Brand{}, records.NotFound(store.ErrNotFound, "brand", brandID)
	}
	b, err := records.Get[tally.Brand](ctx, s.db, keys.Brand(brandID))
	b.Timezone = cmp.Or(b.Timezone, "UTC") // brands made before there was a zone
	return b, records.NotFound(err, "brand", brandID)
}

// SetBrandTimezone sets the zone the brand's days are counted in. The
// zone comes loaded (the caller has the zone database; most of Tally's
// functions do without one): a zone of no name, or the machine's Local,
// is refused.
func (s *Service) SetBrandTimezone(ctx context.Context, brandID string, zone *time.Location) (tally.Brand, error) {
	if zone == nil || zone == time.Local || zone.String() == "Local" || zone.String() == "" {
		return tally.Brand{}, validate.InvalidField("timezone", "timezone must be an IANA time zone name such as UTC, Europe/Paris or America/New_York.")
	}
	b, err := s.Brand(ctx, brandID)
	if err != nil {
		return b, err
	}
	if b.Timezone == zone.String() {
		return b, nil // nothing changes
	}
	summary := "time zone " + cmp.Or(b.Timezone, "UTC") + " → " + zone.String()
	b.Timezone = zone.String()
	return b, s.db.Transact(ctx, append([]store.Op{store.Put(brandItem(b), store.Exists())},
		audit.Record(ctx, brandID, audit.BrandTimezoneChanged, brandID, summary, s.db.Now())...)...)
}

// apiKeyRecord is the stored form of a key: the public fields and the hash.
// LastUsedAt lives outside the JSON body, in the numeric attribute
// lastUsedMs, so that noting a use changes nothing else of the item.
type apiKeyRecord struct {
	tally.APIKey
	Hash string `json:"hash"`
	// Counted is whether the key is in its brand's count of active keys,
	// which keys made before there was a count are not.
	Counted bool `json:"counted,omitempty"`
}

// lastUsedAttr holds when a key was last used, in Unix milliseconds;
// revokedAttr when it was revoked (0 or absent while it works), so that a
// revocation happens once however many ask for it at the same time.
const (
	lastUsedAttr = "lastUsedMs"
	revokedAttr  = "revokedMs"
)

// MaxActiveKeys bounds a brand's working API keys: each key has a rate limit
// of its own, so keys minted without bound would multiply the brand's.
const MaxActiveKeys = 25

// activeKeys is the attribute of keys.APIKeyCount that counts them.
const activeKeys = "n"

func (r *apiKeyRecord) FromItem(it store.Item) {
	r.LastUsedAt = nil
	if ms := it.Nums[lastUsedAttr]; ms > 0 {
		at := tally.NewTime(time.UnixMilli(ms))
		r.LastUsedAt = &at
	}
}

// Hash is the hash under which a secret is stored.
func Hash(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// APIKeyInput is the body of POST /keys.
type APIKeyInput struct {
	Name *string `json:"name"`
}

// CreatedAPIKey is a new key with its secret, which is shown this once.
type CreatedAPIKey struct {
	tally.APIKey
	Key string `json:"key"`
}

// CreateAPIKey makes an unnamed key for a brand and returns it with its
// secret, which is not stored and cannot be shown again.
func (s *Service) CreateAPIKey(ctx context.Context, brandID string) (tally.APIKey, string, error) {
	k, err := s.CreateKey(ctx, brandID, APIKeyInput{})
	return k.APIKey, k.Key, err
}

// CreateKey makes a key for a brand (POST /keys) and returns it with its
// secret, which is not stored and cannot be shown again.
func (s *Service) CreateKey(ctx context.Context, brandID string, in APIKeyInput) (CreatedAPIKey, error) {
	if err := validate.Text("name", in.Name, false, 100); err != nil {
		return CreatedAPIKey{}, err
	}
	if _, err := s.Brand(ctx, brandID); err != nil {
		return CreatedAPIKey{}, err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return CreatedAPIKey{}, err
	}
	secret := secretPrefix + hex.EncodeToString(raw)
	now := s.db.Now()
	rec := apiKeyRecord{
		APIKey: tally.APIKey{ID: ids.New("key_", now), BrandID: brandID, Name: strings.TrimSpace(validate.Deref(in.Name, "")),
			Prefix: secret[:len(secretPrefix)+4], CreatedAt: tally.NewTime(now)},
		Hash:    Hash(secret),
		Counted: true,
	}
	err := s.db.Transact(ctx, append([]store.Op{
		store.Increment(keys.APIKeyCount(brandID), map[string]int64{activeKeys: 1}, store.NumLess(activeKeys, MaxActiveKeys)),
		store.Put(apiKeyItem(rec), store.NotExists())},
		audit.Record(ctx, brandID, audit.KeyCreated, rec.ID, keyLabel(rec.APIKey), now)...)...)
	if i, failed := store.FailedOp(err); failed && i == 0 {
		return CreatedAPIKey{}, tally.Errorf(tally.ECodeConflict, "A brand has at most %d active API keys; revoke one first.", MaxActiveKeys)
	}
	return CreatedAPIKey{APIKey: rec.APIKey, Key: secret}, err
}

// keyLabel names a key in the audit log by its name and the first
// characters of its secret, as the key list shows them.
func keyLabel(k tally.APIKey) string {
	if k.Name == "" {
		return k.Prefix + "…"
	}
	return k.Name + " (" + k.Prefix + "…)"
}

func apiKeyItem(rec apiKeyRecord) store.Item {
	it := store.Item{
		Key:  keys.APIKey(rec.Hash),
		GSI1: store.IndexKey{PK: keys.APIKeysByBrand(rec.BrandID), SK: rec.ID},
		GSI2: store.IndexKey{PK: keys.APIKeyByID(rec.ID), SK: rec.ID},
		Data: records.MustJSON(rec),
	}
	it.Nums = map[string]int64{}
	if rec.LastUsedAt != nil {
		it.Nums[lastUsedAttr] = rec.LastUsedAt.UnixMilli()
	}
	if rec.RevokedAt != nil {
		it.Nums[revokedAttr] = rec.RevokedAt.UnixMilli()
	}
	return it
}

// APIKeys lists a brand's keys, revoked ones included, newest first (the
// admin API).
func (s *Service) APIKeys(ctx context.Context, brandID string, p records.ListParams) ([]tally.APIKey, string, error) {
	return s.apiKeyList(ctx, brandID, p, nil)
}

// ActiveAPIKeys lists the brand's keys that work, newest first (GET /keys:
// a deleted key is gone from it).
func (s *Service) ActiveAPIKeys(ctx context.Context, brandID string, p records.ListParams) ([]tally.APIKey, string, error) {
	return s.apiKeyList(ctx, brandID, p, func(r *apiKeyRecord) bool { return r.RevokedAt == nil })
}

func (s *Service) apiKeyList(ctx context.Context, brandID string, p records.ListParams, keep func(*apiKeyRecord) bool) ([]tally.APIKey, string, error) {
	if _, err := s.Brand(ctx, brandID); err != nil {
		return nil, "", err
	}
	recs, next, err := records.List(ctx, s.db, []records.Partition{{Index: store.GSI1, PK: keys.APIKeysByBrand(brandID)}}, p, keep)
	keys := make([]tally.APIKey, len(recs))
	for i, r := range recs {
		keys[i] = r.APIKey
	}
	return keys, next, err
}

// RevokeAPIKey stops a key of any brand from working (the admin API).
// Revoking a revoked key changes nothing.
func (s *Service) RevokeAPIKey(ctx context.Context, keyID string) (tally.APIKey, error) {
	return s.revokeAPIKey(ctx, "", keyID)
}

// DeleteAPIKey revokes one of the brand's keys (DELETE /keys/:id). A key
// already revoked, or another brand's, answers 404.
func (s *Service) DeleteAPIKey(ctx context.Context, brandID, keyID string) (tally.APIKey, error) {
	return s.revokeAPIKey(ctx, brandID, keyID)
}

// revokeAPIKey revokes a key; with a brandID, only that brand's working
// keys are found. Instances that cached the key notice within the cache TTL.
func (s *Service) revokeAPIKey(ctx context.Context, brandID, keyID string) (tally.APIKey, error) {
	missing := tally.Errorf(tally.ECodeNotFound, "No API key with id %q.", keyID)
	if !ids.Valid("key_", keyID) {
		return tally.APIKey{}, missing
	}
	page, err := s.db.Query(ctx, store.Query{Index: store.GSI2, PK: keys.APIKeyByID(keyID), Limit: 1})
	if err != nil {
		return tally.APIKey{}, err
	}
	if len(page.Items) == 0 {
		return tally.APIKey{}, missing
	}
	var rec apiKeyRecord
	if err := records.Decode(page.Items[0], &rec); err != nil {
		return tally.APIKey{}, err
	}
	switch {
	case brandID != "" && (rec.BrandID != brandID || rec.RevokedAt != nil):
		return tally.APIKey{}, missing
	case rec.RevokedAt != nil:
		return rec.APIKey, nil
	}
	at := tally.NewTime(s.db.Now())
	rec.RevokedAt = &at
	ops := []store.Op{store.Put(apiKeyItem(rec), store.Exists(), store.NumEquals(revokedAttr, 0))}
	if rec.Counted {
		ops = append(ops, store.Increment(keys.APIKeyCount(rec.BrandID), map[string]int64{activeKeys: -1}))
	}
	ops = append(ops, audit.Record(ctx, rec.BrandID, audit.KeyRevoked, rec.ID, keyLabel(rec.APIKey), at.Time)...)
	err = s.db.Transact(ctx, ops...)
	if _, failed := store.FailedOp(err); failed {
		// Revoked by another request meanwhile, which counted it out.
		if brandID != "" {
			return tally.APIKey{}, missing
		}
		rec, err = records.Get[apiKeyRecord](ctx, s.db, keys.APIKey(rec.Hash))
		return rec.APIKey, err
	}
	if err != nil {
		return tally.APIKey{}, err
	}
	s.apiKeys.Put(rec.Hash, rec) // this instance stops accepting it at once
	return rec.APIKey, nil
}

// Principal is who a request acts for.
type Principal struct {
	BrandID string
	KeyID   string
}

// ErrUnauthorized answers every request without a valid API key: the same
// message whatever was wrong, so callers learn nothing about which keys exist.
var ErrUnauthorized = tally.Errorf(tally.ECodeUnauthorized, "Provide a valid API key as 'Authorization: Bearer <key>'.")

// Authenticate resolves a secret to its brand. Any failure is ErrUnauthorized.
func (s *Service) Authenticate(ctx context.Context, secret string) (Principal, error) {
	denied := ErrUnauthorized
	if !strings.HasPrefix(secret, secretPrefix) || len(secret) > 200 {
		return Principal{}, denied
	}
	hash := Hash(secret)
	if _, unknown := s.unknownKeys.Get(hash); unknown {
		return Principal{}, denied
	}
	rec, ok := s.apiKeys.Get(hash)
	if !ok {
		var err error
		rec, err = records.Get[apiKeyRecord](ctx, s.db, keys.APIKey(hash))
		if errors.Is(err, store.ErrNotFound) {
			s.unknownKeys.Put(hash, struct{}{})
			return Principal{}, denied
		}
		if err != nil {
			return Principal{}, err
		}
		// A revocation this instance made meanwhile must not be undone by
		// the older record it read.
		s.apiKeys.PutUnless(hash, rec, func(cached apiKeyRecord) bool { return cached.RevokedAt != nil })
	}
	if rec.RevokedAt != nil {
		return Principal{}, denied
	}
	s.noteKeyUse(ctx, rec)
	return Principal{BrandID: rec.BrandID, KeyID: rec.ID}, nil
}

// lastUsedStep is how stale a key's lastUsedAt may get. A key in use costs
// one conditional write per step (per instance at worst, when several race
// for it), not one per request.
const lastUsedStep = time.Minute

// noteKeyUse moves the key's lastUsedAt to now when it is a step or more
// behind. The write is a compare-and-set on the stored value, so of the
// instances that notice the same stale value, one writes. Failing to note a
// use fails no request: the next one tries again.
func (s *Service) noteKeyUse(ctx context.Context, rec apiKeyRecord) {
	now := s.db.Now()
	var seen int64
	if rec.LastUsedAt != nil {
		if now.Sub(rec.LastUsedAt.Time) < lastUsedStep {
			return
		}
		seen = rec.LastUsedAt.UnixMilli()
	}
	if _, busy := s.notingKeys.LoadOrStore(rec.Hash, true); busy {
		return // another request of this instance is writing it
	}
	defer s.notingKeys.Delete(rec.Hash)
	_, err := s.db.Update(ctx, store.Op{Kind: store.OpUpdate, Key: keys.APIKey(rec.Hash),
		Add:   map[string]int64{lastUsedAttr: now.UnixMilli() - seen},
		Conds: []store.Cond{store.Exists(), store.NumEquals(lastUsedAttr, seen)}})
	if _, lost := store.FailedOp(err); err == nil || lost { // lost: another instance noted it just now
		at := tally.NewTime(now)
		rec.LastUsedAt = &at
		s.apiKeys.PutUnless(rec.Hash, rec, func(cached apiKeyRecord) bool { return cached.RevokedAt != nil })
	}
}
