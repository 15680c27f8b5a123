package validate

import (
	"net/mail"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/fields"
	"github.com/tally-hq/tally/internal/ids"
)

func Invalid(format string, args ...any) error {
	return tally.Errorf(tally.ECodeValidation, format, args...)
}

// InvalidField is a validation error about one input field.
func InvalidField(field, format string, args ...any) error {
	e := tally.Errorf(tally.ECodeValidation, format, args...)
	e.Field = field
	return e
}

// FieldErrors maps each field with a problem to its first message, for
// forms that show every problem at once.
func FieldErrors(errs ...error) map[string]string {
	out := map[string]string{}
	for _, err := range errs {
		if f := tally.ErrorField(err); f != "" && out[f] == "" {
			out[f] = tally.ErrorMessage(err)
		}
	}
	return out
}

// Text checks a one-line string field: not blank when required, at most
// maxLen characters, and only characters that show as what they are (see
// plainText). Every text field of every input goes through it (or
// paragraph), so they all refuse the same things.
func Text(field string, v *string, required bool, maxLen int) error {
	return checkText(field, v, required, maxLen, false)
}

// Paragraph is text for a free-text field that may hold line breaks and tabs.
func Paragraph(field string, v *string, required bool, maxLen int) error {
	return checkText(field, v, required, maxLen, true)
}

func checkText(field string, v *string, required bool, maxLen int, multiline bool) error {
	if required && (v == nil || strings.TrimSpace(*v) == "") {
		return InvalidField(field, "%s is required.", field)
	}
	// An optional value of only white space is checked like any other: a
	// lone line break or tab is refused, not taken for blank and stored.
	if v == nil || *v == "" {
		return nil
	}
	if utf8.RuneCountInString(*v) > maxLen {
		return InvalidField(field, "%s must be at most %d characters.", field, maxLen)
	}
	if r, ok := plainText(*v, multiline); !ok {
		if r == utf8.RuneError {
			return InvalidField(field, "%s is not valid UTF-8.", field)
		}
		return InvalidField(field, "%s must not contain the character U+%04X: control characters, bidirectional overrides and line separators are not allowed.", field, r)
	}
	return nil
}

// plainText reports whether s is valid UTF-8 without characters that do
// not show as themselves: control characters (C0, DEL, C1; line breaks and
// tabs are allowed when multiline), the bidirectional formatting characters
// (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), with which stored
// text reads differently than it is ("Trojan Source"), line and paragraph
// separators, and noncharacters. If not, it returns the first offending
// rune (utf8.RuneError for invalid UTF-8).
func plainText(s string, multiline bool) (rune, bool) {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"): // an invalid byte, not U+FFFD itself
			return utf8.RuneError, false
		case Hidden(r, multiline):
			return r, false
		}
	}
	return 0, true
}

// Hidden reports whether r is one of the characters plainText refuses.
func Hidden(r rune, multiline bool) bool {
	if multiline && (r == '\n' || r == '\r' || r == '\t') {
		return false
	}
	if r < utf8.RuneSelf { // the classes below hold no other ASCII character
		return r < ' ' || r == 0x7f
	}
	return unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r) || unicode.In(r, unicode.Zl, unicode.Zp) ||
		unicode.Is(unicode.Noncharacter_Code_Point, r)
}

// Required checks that a field that is not text is present.
func Required(field string, present bool) error {
	if !present {
		return InvalidField(field, "%s is required.", field)
	}
	return nil
}

// Ranges checks every integer field of a body that has a range tag (see
// package fields), nested ones included, in the order they are declared.
func Ranges(body any) []error {
	var errs []error
	for _, bad := range fields.OutOfRange(body) {
		errs = append(errs, InvalidField(bad.Path, "%s", bad.RangeMessage(bad.Path)))
	}
	return errs
}

func Currency(field string, v *string, required bool) error {
	if v == nil {
		if required {
			return InvalidField(field, "%s is required.", field)
		}
		return nil
	}
	if !currencies[*v] {
		return InvalidField(field, "%s must be an ISO 4217 currency code in upper case, such as USD or EUR.", field)
	}
	return nil
}

func HTTPURL(field string, v *string, required bool) error {
	if err := Text(field, v, required, 2048); err != nil || v == nil {
		return err
	}
	u, err := url.Parse(*v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return InvalidField(field, "%s must be an absolute http or https URL.", field)
	}
	return nil
}

func Email(field string, v *string) error {
	if err := Text(field, v, true, 254); err != nil {
		return err
	}
	a, err := mail.ParseAddress(*v)
	if err != nil || a.Address != *v {
		return InvalidField(field, "%s must be a plain e-mail address such as name@example.com.", field)
	}
	return nil
}

func OneOf(field string, v *string, allowed ...string) error {
	if v == nil {
		return nil
	}
	for _, a := range allowed {
		if *v == a {
			return nil
		}
	}
	// "" among the allowed values stands for "no filter": not worth naming.
	named := slices.DeleteFunc(slices.Clone(allowed), func(a string) bool { return a == "" })
	return InvalidField(field, "%s must be one of: %s.", field, strings.Join(named, ", "))
}

// IDFilter checks an optional identifier filter, so a mistyped id is an
// error rather than an empty result.
func IDFilter(field, prefix, v string) error {
	if v != "" && !ids.Valid(prefix, v) {
		return InvalidField(field, "%s must be an identifier starting with %q.", field, prefix)
	}
	return nil
}

func First(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func Deref[T any](p *T, def T) T {
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

// TimeParam reads an RFC 3339 timestamp or a date; a date as an upper
// bound means the end of that day.
func TimeParam(field, v string, endOfDay bool) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		if t, err = DateParam(field, v); err != nil {
			return time.Time{}, Invalid("%s must be an RFC 3339 timestamp or a date (YYYY-MM-DD) from %s to %s.", field, MinDate, MaxDate)
		}
		if endOfDay {
			t = t.Add(24*time.Hour - time.Millisecond)
		}
	}
	if t = t.UTC(); t.Before(minTime) || t.After(maxTime) {
		return time.Time{}, Invalid("%s must be from %s to %s.", field, MinDate, MaxDate)
	}
	return t, nil
}

// Dates and times in filters lie from MinDate to MaxDate (UTC): records
// are stamped within it, and a bound outside it would not narrow a list but
// silently widen it (identifiers carry a Unix time in milliseconds, which
// has no place for 1969).
const (
	MinDate = "1970-01-01"
	MaxDate = "9999-12-31"
)

var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)
)

// DateParam reads a date (YYYY-MM-DD) from MinDate to MaxDate.
func DateParam(field, v string) (time.Time, error) {
	d, err := time.Parse(time.DateOnly, v)
	if err != nil || d.Before(minTime) || d.After(maxTime) {
		return time.Time{}, Invalid("%s must be a date (YYYY-MM-DD) from %s to %s.", field, MinDate, MaxDate)
	}
	return d, nil
}
