package tracking

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
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
		now := s.Now()
		rec := postbackTokenRecord{
			PostbackToken: tally.PostbackToken{ID: ids.New("pbt_", now), BrandID: brandID, Prefix: secret[:len(postbackTokenPrefix)+4], CreatedAt: tally.NewTime(now)},
			Hash:          hashSecret(secret),
		}
		ops := []store.Op{store.Put(store.Item{Key: keys.PostbackToken(rec.Hash), Data: records.MustJSON(rec)}, store.NotExists())}
		pointer := store.Item{Key: keys.BrandPostbackToken(brandID), Attrs: map[string]string{"tokenId": rec.ID}, Data: records.MustJSON(rec)}
		if cur.ID == "" {
			ops = append(ops, store.Put(pointer, store.NotExists()))
		} else {
			ops = append(ops, store.Put(pointer, store.AttrEquals("tokenId", cur.ID)), store.Delete(keys.PostbackToken(cur.Hash)))
		}
		err = s.transact(ctx, ops...)
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
	rec, err := records.Get[postbackTokenRecord](ctx, s.store, keys.BrandPostbackToken(brandID))
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
		err = s.transact(ctx,
			store.Delete(keys.BrandPostbackToken(brandID), store.AttrEquals("tokenId", cur.ID)),
			store.Delete(keys.PostbackToken(cur.Hash)))
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
	hash := hashSecret(secret)
	rec, ok := s.postbackTokens.Get(hash)
	if !ok {
		var err error
		rec, err = records.Get[postbackTokenRecord](ctx, s.store, keys.PostbackToken(hash))
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

// InboundPostback is what an advertiser's GET postback carries.
type InboundPostback struct {
	ClickID  string // click_id, required
	TxnID    string // txn_id: the advertiser's transaction id (idempotency); default the click's id
	Amount   string // amount: the revenue, in major units ("12.50")
	Currency string // currency: default the offer's
}

// RecordPostback records the conversion of a click from an advertiser's GET
// postback, with the rules, idempotency and events of RecordConversion.
func (s *Service) RecordPostback(ctx context.Context, brandID string, in InboundPostback) (tally.Conversion, bool, error) {
	c, created, err := s.recordPostback(ctx, brandID, in)
	return c, created, inPostbackWords(err)
}

// postbackWords are RecordConversion's names of the fields a GET postback
// sets, with the query parameters that set them.
var postbackWords = []struct{ field, param string }{{"clickId", "click_id"}, {"externalTxnId", "txn_id"}}

// inPostbackWords names the query parameter in a validation message about
// a field a GET postback sets: the advertiser sent click_id, not clickId.
func inPostbackWords(err error) error {
	var e *tally.Error
	if !errors.As(err, &e) || e.Code != tally.ECodeValidation {
		return err
	}
	for _, w := range postbackWords {
		if rest, ok := strings.CutPrefix(e.Message, w.field+" "); ok {
			renamed := *e
			renamed.Message, renamed.Field = w.param+" "+rest, w.param
			return &renamed
		}
	}
	return err
}

func (s *Service) recordPostback(ctx context.Context, brandID string, in InboundPostback) (tally.Conversion, bool, error) {
	if in.ClickID == "" {
		return tally.Conversion{}, false, validate.InvalidField("click_id", "click_id is required: the {click_id} the tracking link passed to the landing page.")
	}
	ci := ConversionInput{ClickID: &in.ClickID}
	switch {
	case in.TxnID != "":
		ci.ExternalTxnID = &in.TxnID
	case ids.Valid("clk_", in.ClickID):
		// Without txn_id the click is the transaction, as Everflow and TUNE
		// count one conversion per click then: an advertiser's system firing
		// the same postback again (after a timeout, say) replays it instead
		// of paying twice. (An invalid click id is refused as one.)
		ci.ExternalTxnID = &in.ClickID
	}
	if in.Currency != "" {
		ci.Currency = &in.Currency
		if err := validate.Currency("currency", ci.Currency, false); err != nil {
			return tally.Conversion{}, false, err
		}
	}
	if in.Amount != "" || in.Currency != "" {
		click, err := s.Click(ctx, brandID, in.ClickID)
		if err != nil {
			return s.RecordConversion(ctx, brandID, ci) // says what is wrong with the click
		}
		offer, err := s.cachedOffer(ctx, brandID, click.OfferID)
		if err != nil {
			return s.RecordConversion(ctx, brandID, ci)
		}
		cur := offer.offer.Currency
		if in.Currency != "" && in.Currency != cur {
			// The payout is the offer's, in the offer's currency.
			return tally.Conversion{}, false, validate.InvalidField("currency", "currency %s is not the offer's %s: a postback records the offer's payout, so send amount in %s.", in.Currency, cur, cur)
		}
		if in.Amount != "" {
			cents, err := minorUnits(in.Amount, cur)
			if err != nil {
				return tally.Conversion{}, false, err
			}
			ci.RevenueCents = &cents
		}
	}
	return s.RecordConversion(ctx, brandID, ci)
}

var decimalAmount = regexp.MustCompile(`^[0-9]{1,13}(\.[0-9]{1,3})?$`)

// minorUnits turns a decimal amount in major units into minor units of the
// currency, the inverse of majorUnits: "12.50" USD is 1250, "1500" JPY is
// 1500, "1.234" KWD is 1234.
func minorUnits(amount, currency string) (int64, error) {
	places := minorUnitExponent(currency)
	whole, frac, _ := strings.Cut(amount, ".")
	if !decimalAmount.MatchString(amount) || len(frac) > places {
		return 0, validate.InvalidField("amount", "amount must be a decimal number with at most %d decimals for %s, such as %s.", places, currency, []string{"1500", "", "12.50", "1.250"}[places])
	}
	// At most 16 digits: the pattern's 13 and 3; an int64 holds them.
	n, err := strconv.ParseInt(whole+frac+strings.Repeat("0", places-len(frac)), 10, 64)
	if err != nil || n > 1e12 { // revenueCents' bound
		return 0, validate.InvalidField("amount", "amount is too large.")
	}
	return n, nil
}
