package tracking

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/store"
)

// secretPrefix starts every API key secret, so leaked keys are easy to spot
// in code and logs.
const secretPrefix = "tally_sk_"

// CreateBrand creates a tenant.
func (s *Service) CreateBrand(ctx context.Context, name string) (tally.Brand, error) {
	name = strings.TrimSpace(name)
	if name == "" || len(name) > 200 {
		return tally.Brand{}, tally.Errorf(tally.ECodeValidation, "name is required and must be at most 200 characters.")
	}
	now := s.Now()
	b := tally.Brand{ID: ids.New("brd_", now), Name: name, CreatedAt: tally.NewTime(now)}
	err := s.transact(ctx, store.Put(store.Item{Key: brandKey(b.ID), Data: mustJSON(b)}, store.NotExists()))
	return b, err
}

// Brand returns a brand.
func (s *Service) Brand(ctx context.Context, brandID string) (tally.Brand, error) {
	if !ids.Valid("brd_", brandID) {
		return tally.Brand{}, notFound(store.ErrNotFound, "brand", brandID)
	}
	b, err := getRecord[tally.Brand](ctx, s.store, brandKey(brandID))
	return b, notFound(err, "brand", brandID)
}

// apiKeyRecord is the stored form of a key: the public fields and the hash.
type apiKeyRecord struct {
	tally.APIKey
	Hash string `json:"hash"`
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// CreateAPIKey makes a key for a brand and returns it with its secret, which
// is not stored and cannot be shown again.
func (s *Service) CreateAPIKey(ctx context.Context, brandID string) (tally.APIKey, string, error) {
	if _, err := s.Brand(ctx, brandID); err != nil {
		return tally.APIKey{}, "", err
	}
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return tally.APIKey{}, "", err
	}
	secret := secretPrefix + hex.EncodeToString(raw)
	now := s.Now()
	rec := apiKeyRecord{
		APIKey: tally.APIKey{ID: ids.New("key_", now), BrandID: brandID, Prefix: secret[:len(secretPrefix)+4], CreatedAt: tally.NewTime(now)},
		Hash:   hashSecret(secret),
	}
	err := s.transact(ctx, store.Put(apiKeyItem(rec), store.NotExists()))
	return rec.APIKey, secret, err
}

func apiKeyItem(rec apiKeyRecord) store.Item {
	return store.Item{
		Key:  apiKeyKey(rec.Hash),
		GSI1: store.IndexKey{PK: apiKeysByBrand(rec.BrandID), SK: rec.ID},
		GSI2: store.IndexKey{PK: apiKeyByID(rec.ID), SK: rec.ID},
		Data: mustJSON(rec),
	}
}

// APIKeys lists a brand's keys, newest first.
func (s *Service) APIKeys(ctx context.Context, brandID string, p ListParams) ([]tally.APIKey, string, error) {
	if _, err := s.Brand(ctx, brandID); err != nil {
		return nil, "", err
	}
	recs, next, err := list[apiKeyRecord](ctx, s.store, []partition{{index: store.GSI1, pk: apiKeysByBrand(brandID)}}, p, nil)
	keys := make([]tally.APIKey, len(recs))
	for i, r := range recs {
		keys[i] = r.APIKey
	}
	return keys, next, err
}

// RevokeAPIKey stops a key from working. Instances that cached it notice
// within the cache TTL.
func (s *Service) RevokeAPIKey(ctx context.Context, keyID string) (tally.APIKey, error) {
	page, err := s.store.Query(ctx, store.Query{Index: store.GSI2, PK: apiKeyByID(keyID), Limit: 1})
	if err != nil {
		return tally.APIKey{}, err
	}
	if len(page.Items) == 0 {
		return tally.APIKey{}, tally.Errorf(tally.ECodeNotFound, "No API key with id %q.", keyID)
	}
	var rec apiKeyRecord
	if err := decode(page.Items[0], &rec); err != nil {
		return tally.APIKey{}, err
	}
	if rec.RevokedAt != nil {
		return rec.APIKey, nil
	}
	at := tally.NewTime(s.Now())
	rec.RevokedAt = &at
	if err := s.transact(ctx, store.Put(apiKeyItem(rec), store.Exists())); err != nil {
		return tally.APIKey{}, err
	}
	s.apiKeys.put(rec.Hash, rec) // this instance stops accepting it at once
	return rec.APIKey, nil
}

// Principal is who a request acts for.
type Principal struct {
	BrandID string
	KeyID   string
}

// Authenticate resolves a secret to its brand. Any failure is 401 with the
// same message, so callers learn nothing about which keys exist.
func (s *Service) Authenticate(ctx context.Context, secret string) (Principal, error) {
	denied := tally.Errorf(tally.ECodeUnauthorized, "Provide a valid API key as 'Authorization: Bearer <key>'.")
	if !strings.HasPrefix(secret, secretPrefix) || len(secret) > 200 {
		return Principal{}, denied
	}
	hash := hashSecret(secret)
	rec, ok := s.apiKeys.get(hash)
	if !ok {
		var err error
		rec, err = getRecord[apiKeyRecord](ctx, s.store, apiKeyKey(hash))
		if errors.Is(err, store.ErrNotFound) {
			return Principal{}, denied
		}
		if err != nil {
			return Principal{}, err
		}
		// A revocation this instance made meanwhile must not be undone by
		// the older record it read.
		s.apiKeys.putUnless(hash, rec, func(cached apiKeyRecord) bool { return cached.RevokedAt != nil })
	}
	if rec.RevokedAt != nil {
		return Principal{}, denied
	}
	return Principal{BrandID: rec.BrandID, KeyID: rec.ID}, nil
}

// RateDecision is the outcome of counting one request against a limit.
type RateDecision struct {
	Allowed   bool
	Limit     int
	Remaining int
	Reset     time.Time     // when the current window ends
	Wait      time.Duration // until Reset
}

// rateWindow is the fixed window of every rate limit.
const rateWindow = time.Minute

// Allow counts one request of bucket (an API key, a client IP) against limit
// requests per minute. The count is a conditional counter in the store, so
// it is exact across every instance sharing the store; a refused request is
// not counted.
func (s *Service) Allow(ctx context.Context, bucket string, limit int) (RateDecision, error) {
	now := s.now()
	window := now.Truncate(rateWindow)
	d := RateDecision{Limit: limit, Reset: window.Add(rateWindow), Wait: window.Add(rateWindow).Sub(now)}
	it, err := s.store.Update(ctx, store.Op{
		Kind:      store.OpUpdate,
		Key:       rateKey(bucket, window.Unix()),
		Add:       map[string]int64{"n": 1},
		ExpiresAt: d.Reset.Add(time.Hour).Unix(),
		Conds:     []store.Cond{store.NumLess("n", int64(limit))},
	})
	if _, failed := store.FailedOp(err); failed {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	d.Allowed = true
	d.Remaining = max(limit-int(it.Nums["n"]), 0)
	return d, nil
}
