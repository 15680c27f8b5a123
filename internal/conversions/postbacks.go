package conversions

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/money"
	"github.com/tally-hq/tally/internal/validate"
)

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
		click, err := s.click(ctx, brandID, in.ClickID)
		if err != nil {
			return s.RecordConversion(ctx, brandID, ci) // says what is wrong with the click
		}
		offer, err := s.offers.Cached(ctx, brandID, click.OfferID)
		if err != nil {
			return s.RecordConversion(ctx, brandID, ci)
		}
		cur := offer.Offer.Currency
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

var decimalAmount = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// maxRevenueCents is revenueCents' bound (ConversionInput), which an
// amount must keep to.
const maxRevenueCents = 1_000_000_000_000

// maxAmountDigits is the most digits an amount's whole part may have after
// its leading zeros: maxRevenueCents in a currency without decimals.
const maxAmountDigits = 13

// minorUnits turns a decimal amount in major units into minor units of the
// currency, the inverse of money.Major: "12.50" USD is 1250, "1500" JPY is
// 1500, "1.234" KWD is 1234.
func minorUnits(amount, currency string) (int64, error) {
	places := money.Exponent(currency)
	whole, frac, _ := strings.Cut(amount, ".")
	if !decimalAmount.MatchString(amount) || len(frac) > places {
		return 0, validate.InvalidField("amount", "amount must be a decimal number with at most %d decimals for %s, such as %s.", places, currency, []string{"1500", "", "12.50", "1.250"}[places])
	}
	whole = strings.TrimLeft(whole, "0")
	// At most 17 digits (a 0, 13 and 3 decimals): an int64 holds them.
	n, err := strconv.ParseInt("0"+whole+frac+strings.Repeat("0", places-len(frac)), 10, 64)
	if len(whole) > maxAmountDigits || err != nil || n > maxRevenueCents {
		return 0, validate.InvalidField("amount", "amount is too large: at most %s %s.", money.Major(maxRevenueCents, currency), currency)
	}
	return n, nil
}
