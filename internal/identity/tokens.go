package identity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// postbackTokenPrefix starts every postback token, so leaked ones are easy
// to spot and never taken for an API key.
const postbackTokenPrefix = "tally_pb_"

// postbackTokenRecord is the stored token: the public fields and the hash.
type postbackTokenRecord struct {
	tally.PostbackToken
	Hash string `json:"hash"`
}

// CreatedPostbackToken is a new token with its secret, shown this once.
type CreatedPostbackToken struct {
	tally.PostbackToken
	Token string `json:"token"`
}

// CreatePostbackToken makes the brand's postback token, or a new one in
// place of the current one, which stops working (at once on this instance,
// within the key cache time on others).
func (s *Service) CreatePostbackToken(ctx context.Context, brandID string) (CreatedPostbackToken, error) {
	raw := make([]byte, 24)
	if _, err := rand.Read(raw); err != nil {
		return CreatedPostbackToken{}, err
	}
	secret := postbackTokenPrefix + hex.EncodeToString(raw)
	for {
		cur, err := s.currentPostbackToken(ctx, brandID)
		if err != nil && tally.ErrorCode(err) != tally.ECodeNotFound {
			return CreatedPostbackToken{}, err
		}
		now := s.db.Now()
		rec := postbackTokenRecord{
			PostbackToken: tally.PostbackToken{ID: ids.New("pbt_", now), BrandID: brandID, Prefix: secret[:len(postbackTokenPrefix)+4], CreatedAt: tally.NewTime(now)},
			Hash:          Hash(secret),
		}
		ops := []store.Op{store.Put(store.Item{Key: keys.PostbackToken(rec.Hash), Data: records.MustJSON(rec)}, store.NotExists())}
		pointer := store.Item{Key: keys.BrandPostbackToken(brandID), Attrs: map[string]string{"tokenId": rec.ID}, Data: records.MustJSON(rec)}
		if cur.ID == "" {
			ops = append(ops, store.Put(pointer, store.NotExists()))
		} else {
			ops = append(ops, store.Put(pointer, store.AttrEquals("tokenId", cur.ID)), store.Delete(keys.PostbackToken(cur.Hash)))
		}
		ops = append(ops, audit.Record(ctx, brandID, audit.PostbackTokenCreated, rec.ID, rec.Prefix+"…", now)...)
		err = s.db.Transact(ctx, ops...)
		if _, failed := store.FailedOp(err); failed {
			continue // rotated by another request meanwhile: rotate what is there now
		}
		if err != nil {
			return CreatedPostbackToken{}, err
		}
		s.postbackTokens.Forget(cur.Hash)
		return CreatedPostbackToken{PostbackToken: rec.PostbackToken, Token: secret}, nil
	}
}

func (s *Service) currentPostbackToken(ctx context.Context, brandID string) (postbackTokenRecord, error) {
	rec, err := records.Get[postbackTokenRecord](ctx, s.db, keys.BrandPostbackToken(brandID))
	if errors.Is(err, store.ErrNotFound) {
		return rec, tally.Errorf(tally.ECodeNotFound, "The brand has no postback token; make one with POST /api/v1/postback-token.")
	}
	return rec, err
}

// PostbackToken returns the brand's postback token, without its secret.
func (s *Service) PostbackToken(ctx context.Context, brandID string) (tally.PostbackToken, error) {
	rec, err := s.currentPostbackToken(ctx, brandID)
	return rec.PostbackToken, err
}

// DeletePostbackToken removes the brand's postback token: inbound GET
// postbacks are refused until it makes another.
func (s *Service) DeletePostbackToken(ctx context.Context, brandID string) (tally.PostbackToken, error) {
	for {
		cur, err := s.currentPostbackToken(ctx, brandID)
		if err != nil {
			return tally.PostbackToken{}, err
		}
		err = s.db.Transact(ctx, append([]store.Op{
			store.Delete(keys.BrandPostbackToken(brandID), store.AttrEquals("tokenId", cur.ID)),
			store.Delete(keys.PostbackToken(cur.Hash))},
			audit.Record(ctx, brandID, audit.PostbackTokenDeleted, cur.ID, cur.Prefix+"…", s.db.Now())...)...)
		if _, failed := store.FailedOp(err); failed {
			continue
		}
		if err != nil {
			return tally.PostbackToken{}, err
		}
		s.postbackTokens.Forget(cur.Hash)
		return cur.PostbackToken, nil
	}
}

// AuthenticatePostback resolves a postback token to its brand. Any failure
// is 401 with the same message.
func (s *Service) AuthenticatePostback(ctx context.Context, secret string) (Principal, error) {
	denied := tally.Errorf(tally.ECodeUnauthorized, "Give the brand's postback token as the token query parameter.")
	if !strings.HasPrefix(secret, postbackTokenPrefix) || len(secret) > 200 {
		return Principal{}, denied
	}
	hash := Hash(secret)
	rec, ok := s.postbackTokens.Get(hash)
	if !ok {
		var err error
		rec, err = records.Get[postbackTokenRecord](ctx, s.db, keys.PostbackToken(hash))
		if errors.Is(err, store.ErrNotFound) {
			return Principal{}, denied
		}
		if err != nil {
			return Principal{}, err
		}
		s.postbackTokens.Put(hash, rec)
	}
	// The lookup went by the hash; comparing it again in constant time
	// keeps a stale or damaged record from ever standing in for another.
	if subtle.ConstantTimeCompare([]byte(rec.Hash), []byte(hash)) != 1 {
		return Principal{}, denied
	}
	return Principal{BrandID: rec.BrandID, KeyID: rec.ID}, nil
}
