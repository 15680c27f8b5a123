package httpapi

import (
	"github.com/tally-hq/tally/internal/conversions"
)

// decodeConversion decodes the usual body of POST /conversions in one scan
// without reflection, where parseBody scans it three times (json.Valid,
// the field names, json.Unmarshal): an object of ConversionInput's fields,
// each at most once, whose values are strings without escapes, integers of
// at most 15 digits, or null. It answers false, leaving in as it was, for
// any other text, which parseBody then reads (or refuses in its own words).
// raw is valid UTF-8 (readBody checked).
func decodeConversion(raw []byte, in *conversions.ConversionInput) bool {
	var out conversions.ConversionInput
	s := scanner{b: raw}
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return s.end() && s.set(in, out)
	}
	var seen uint32
	for {
		key, ok := s.str()
		if !ok || !s.next(':') {
			return false
		}
		var sp **string
		var ip **int64
		bit := uint32(1)
		switch string(key) {
		case "offerId":
			sp, bit = &out.OfferID, 1<<0
		case "partnerId":
			sp, bit = &out.PartnerID, 1<<1
		case "clickId":
			sp, bit = &out.ClickID, 1<<2
		case "currency":
			sp, bit = &out.Currency, 1<<3
		case "sub1":
			sp, bit = &out.Sub1, 1<<4
		case "sub2":
			sp, bit = &out.Sub2, 1<<5
		case "sub3":
			sp, bit = &out.Sub3, 1<<6
		case "sub4":
			sp, bit = &out.Sub4, 1<<7
		case "sub5":
			sp, bit = &out.Sub5, 1<<8
		case "externalTxnId":
			sp, bit = &out.ExternalTxnID, 1<<9
		case "revenueCents":
			ip, bit = &out.RevenueCents, 1<<10
		case "payoutCents":
			ip, bit = &out.PayoutCents, 1<<11
		default:
			return false
		}
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		switch {
		case s.null():
		case sp != nil:
			v, ok := s.str()
			if !ok {
				return false
			}
			str := string(v)
			*sp = &str
		default:
			n, ok := s.integer()
			if !ok {
				return false
			}
			*ip = &n
		}
		if s.next(',') {
			continue
		}
		return s.next('}') && s.end() && s.set(in, out)
	}
}

// scanner reads the few JSON forms decodeConversion takes.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() { s.i = skipSpace(s.b, s.i) }

// next takes c, after white space.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end says whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

func (s *scanner) null() bool {
	s.space()
	if len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "null" {
		s.i += 4
		return true
	}
	return false
}

// str takes a string without escapes or control characters and answers
// its bytes, in raw.
func (s *scanner) str() ([]byte, bool) {
	if !s.next('"') {
		return nil, false
	}
	start := s.i
	for ; s.i < len(s.b); s.i++ {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c < ' ' || c == '\\':
			return nil, false
		}
	}
	return nil, false
}

// integer takes a JSON integer of at most 15 digits (no fraction, no
// exponent), which fits an int64.
func (s *scanner) integer() (int64, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var n int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		n = n*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	digits := s.i - start
	if digits == 0 || digits > 15 || digits > 1 && s.b[start] == '0' {
		return 0, false
	}
	if s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// set stores out in in and answers true.
func (s *scanner) set(in *conversions.ConversionInput, out conversions.ConversionInput) bool {
	*in = out
	return true
}
