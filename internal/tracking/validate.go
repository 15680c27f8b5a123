package tracking

import (
	"net/mail"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
)

func invalid(format string, args ...any) error {
	return tally.Errorf(tally.ECodeValidation, format, args...)
}

// text checks a string field's length in characters; required fields must
// not be blank.
func text(field string, v *string, required bool, maxLen int) error {
	if v == nil || strings.TrimSpace(*v) == "" {
		if required {
			return invalid("%s is required.", field)
		}
		return nil
	}
	if utf8.RuneCountInString(*v) > maxLen {
		return invalid("%s must be at most %d characters.", field, maxLen)
	}
	return nil
}

// cents checks a money amount in minor units.
func cents(field string, v *int64, required bool) error {
	if v == nil {
		if required {
			return invalid("%s is required.", field)
		}
		return nil
	}
	if *v < 0 || *v > maxCents {
		return invalid("%s must be an integer from 0 to %d (minor currency units).", field, int64(maxCents))
	}
	return nil
}

// maxCents keeps sums of many amounts far from int64 overflow.
const maxCents = 1e12

func currency(field string, v *string, required bool) error {
	if v == nil {
		if required {
			return invalid("%s is required.", field)
		}
		return nil
	}
	if !currencies[*v] {
		return invalid("%s must be an ISO 4217 currency code in upper case, such as USD or EUR.", field)
	}
	return nil
}

func httpURL(field string, v *string, required bool) error {
	if err := text(field, v, required, 2048); err != nil || v == nil {
		return err
	}
	u, err := url.Parse(*v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return invalid("%s must be an absolute http or https URL.", field)
	}
	return nil
}

func email(field string, v *string) error {
	if err := text(field, v, true, 254); err != nil {
		return err
	}
	a, err := mail.ParseAddress(*v)
	if err != nil || a.Address != *v {
		return invalid("%s must be a plain e-mail address such as name@example.com.", field)
	}
	return nil
}

func oneOf(field string, v *string, allowed ...string) error {
	if v == nil {
		return nil
	}
	for _, a := range allowed {
		if *v == a {
			return nil
		}
	}
	return invalid("%s must be one of: %s.", field, strings.Join(allowed, ", "))
}

// idFilter checks an optional identifier filter, so a mistyped id is an
// error rather than an empty result.
func idFilter(field, prefix, v string) error {
	if v != "" && !ids.Valid(prefix, v) {
		return invalid("%s must be an identifier starting with %q.", field, prefix)
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// currencies are the active ISO 4217 codes.
var currencies = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range strings.Fields(`AED AFN ALL AMD ANG AOA ARS AUD AWG AZN BAM BBD BDT BGN BHD BIF BMD BND BOB
		BRL BSD BTN BWP BYN BZD CAD CDF CHF CLP CNY COP CRC CUP CVE CZK DJF DKK DOP DZD EGP ERN ETB EUR FJD FKP
		GBP GEL GHS GIP GMD GNF GTQ GYD HKD HNL HTG HUF IDR ILS INR IQD IRR ISK JMD JOD JPY KES KGS KHR KMF KPW
		KRW KWD KYD KZT LAK LBP LKR LRD LSL LYD MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MYR MZN NAD NGN
		NIO NOK NPR NZD OMR PAB PEN PGK PHP PKR PLN PYG QAR RON RSD RUB RWF SAR SBD SCR SDG SEK SGD SHP SLE SOS
		SRD SSP STN SVC SYP SZL THB TJS TMT TND TOP TRY TTD TWD TZS UAH UGX USD UYU UZS VED VES VND VUV WST XAF
		XCD XCG XOF XPF YER ZAR ZMW ZWG`) {
		m[c] = true
	}
	return m
}()
