// Package jsonenc appends the JSON of the records on the click and
// conversion request paths without reflection: encoding/json spent a few
// per cent of the local server's CPU on them, most of it walking the
// struct's fields and allocating. The output is byte for byte what
// encoding/json writes for the same value (the tests compare every field),
// so stored items, events and responses do not change. Everything off the
// hot paths keeps encoding/json.
package jsonenc

import (
	"strconv"
	"unicode/utf8"

	"github.com/tally-hq/tally"
)

// HTML says whether <, > and & are escaped as encoding/json.Marshal does
// (stored items and events), or written as they are, as an Encoder with
// SetEscapeHTML(false) does (API responses).
type HTML bool

const (
	EscapeHTML HTML = true
	KeepHTML   HTML = false
)

const hex = "0123456789abcdef"

// String appends s as a JSON string, escaped as encoding/json escapes it:
// invalid UTF-8 becomes \ufffd, U+2028 and U+2029 are escaped.
func String(b []byte, s string, html HTML) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= ' ' && c != '"' && c != '\\' && (!html || c != '<' && c != '>' && c != '&') {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(append(b, s[start:i]...), `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(append(b, s[start:i]...), '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		start = i
	}
	return append(append(b, s[start:]...), '"')
}

// Time appends t as tally.Time.MarshalJSON writes it.
func Time(b []byte, t tally.Time) []byte {
	return append(t.UTC().AppendFormat(append(b, '"'), tally.TimeLayout), '"')
}

// object writes an object's members: each call of a method after the
// first puts a comma before its member.
type object struct {
	b    []byte
	html HTML
	n    int
}

func (o *object) key(k string) {
	if o.n > 0 {
		o.b = append(o.b, ',')
	}
	o.n++
	o.b = append(append(append(o.b, '"'), k...), '"', ':') // keys are plain ASCII
}

func (o *object) str(k, v string) {
	o.key(k)
	o.b = String(o.b, v, o.html)
}

// strOmit is str for a field tagged omitempty.
func (o *object) strOmit(k, v string) {
	if v != "" {
		o.str(k, v)
	}
}

func (o *object) int(k string, v int64) {
	o.key(k)
	o.b = strconv.AppendInt(o.b, v, 10)
}

func (o *object) time(k string, t tally.Time) {
	o.key(k)
	o.b = Time(o.b, t)
}

// timePtr writes a *tally.Time: null when nil, or nothing when omit.
func (o *object) timePtr(k string, t *tally.Time, omit bool) {
	switch {
	case t != nil:
		o.time(k, *t)
	case !omit:
		o.key(k)
		o.b = append(o.b, "null"...)
	}
}

func (o *object) strings(k string, v []string) {
	o.key(k)
	if v == nil {
		o.b = append(o.b, "null"...)
		return
	}
	o.b = append(o.b, '[')
	for i, s := range v {
		if i > 0 {
			o.b = append(o.b, ',')
		}
		o.b = String(o.b, s, o.html)
	}
	o.b = append(o.b, ']')
}

// Conversion appends c as encoding/json writes a tally.Conversion.
func Conversion(b []byte, c *tally.Conversion, html HTML) []byte {
	o := object{b: append(b, '{'), html: html}
	o.str("id", c.ID)
	o.str("brandId", c.BrandID)
	o.str("offerId", c.OfferID)
	o.str("partnerId", c.PartnerID)
	o.strOmit("clickId", c.ClickID)
	o.int("revenueCents", c.RevenueCents)
	o.int("payoutCents", c.PayoutCents)
	o.str("currency", c.Currency)
	o.str("status", c.Status)
	o.str("sub1", c.Sub1)
	o.str("sub2", c.Sub2)
	o.str("sub3", c.Sub3)
	o.str("sub4", c.Sub4)
	o.str("sub5", c.Sub5)
	o.str("externalTxnId", c.ExternalTxnID)
	o.timePtr("approveAt", c.ApproveAt, false)
	o.timePtr("approvedAt", c.ApprovedAt, true)
	o.strOmit("reversalReason", c.ReversalReason)
	o.strOmit("reversalNote", c.ReversalNote)
	o.timePtr("reversedAt", c.ReversedAt, true)
	o.time("createdAt", c.CreatedAt)
	o.time("updatedAt", c.UpdatedAt)
	return append(o.b, '}')
}

// Click appends c as encoding/json writes a tally.Click.
func Click(b []byte, c *tally.Click, html HTML) []byte {
	o := object{b: append(b, '{'), html: html}
	o.str("id", c.ID)
	o.str("brandId", c.BrandID)
	o.str("offerId", c.OfferID)
	o.str("partnerId", c.PartnerID)
	o.str("ip", c.IP)
	o.str("userAgent", c.UserAgent)
	o.str("referer", c.Referer)
	o.str("sub1", c.Sub1)
	o.str("sub2", c.Sub2)
	o.str("sub3", c.Sub3)
	o.str("sub4", c.Sub4)
	o.str("sub5", c.Sub5)
	o.int("fraudScore", int64(c.FraudScore))
	o.strings("fraudSignals", c.FraudSignals)
	o.strOmit("conversionId", c.ConversionID)
	o.time("createdAt", c.CreatedAt)
	return append(o.b, '}')
}

// ConversionEventData appends d as encoding/json writes a
// tally.ConversionEventData.
func ConversionEventData(b []byte, d *tally.ConversionEventData, html HTML) []byte {
	o := object{b: append(b, '{'), html: html}
	o.str("conversionId", d.ConversionID)
	o.str("partnerId", d.PartnerID)
	o.str("offerId", d.OfferID)
	o.int("revenueCents", d.RevenueCents)
	o.int("payoutCents", d.PayoutCents)
	o.str("currency", d.Currency)
	o.str("status", d.Status)
	o.str("sub1", d.Sub1)
	o.str("externalTxnId", d.ExternalTxnID)
	o.strOmit("clickId", d.ClickID)
	o.strOmit("reason", d.Reason)
	o.strOmit("reversalReason", d.ReversalReason)
	o.strOmit("reversalNote", d.ReversalNote)
	return append(o.b, '}')
}
