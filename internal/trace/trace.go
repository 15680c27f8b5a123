// Package trace carries W3C Trace Context (https://www.w3.org/TR/trace-context/)
// through Tally: an API request continues its caller's trace (or starts
// one), the events it causes keep the request's span, and their deliveries
// send it on as a traceparent header, so a receiver can join its trace to
// ours.
package trace

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"math/rand/v2"
)

// Header is the HTTP header that carries a span to the next hop.
const Header = "traceparent"

// Attr is the item attribute that keeps the span of the request that wrote
// an item (an event, or what an event is made from later). An item without
// it has no trace: it was written outside a request, or before traces were
// kept.
const Attr = "traceparent"

// sampled is the only flag of version 00: the caller may have recorded the
// trace.
const sampled = 0x01

// Span names one span of a trace.
type Span struct {
	TraceID [16]byte
	SpanID  [8]byte
	Flags   byte
}

// New starts a trace: a new trace id and span id. It is marked sampled, so
// that a receiver that follows its caller's decision records its part.
func New() Span {
	var s Span
	for s.TraceID == ([16]byte{}) {
		binary.BigEndian.PutUint64(s.TraceID[:8], rand.Uint64())
		binary.BigEndian.PutUint64(s.TraceID[8:], rand.Uint64())
	}
	s.SpanID, s.Flags = newSpanID(), sampled
	return s
}

// Child is a new span of the same trace under s: a step of ours that s
// caused.
func (s Span) Child() Span {
	s.SpanID = newSpanID()
	return s
}

func newSpanID() [8]byte {
	var id [8]byte
	for id == ([8]byte{}) {
		binary.BigEndian.PutUint64(id[:], rand.Uint64())
	}
	return id
}

// Continue is the span of a request that came with the traceparent header
// values given: a child of the caller's span when exactly one valid value
// came, else the start of a new trace (the specification says to restart
// on anything else).
func Continue(values []string) Span {
	if len(values) == 1 {
		if parent, ok := Parse(values[0]); ok {
			return parent.Child()
		}
	}
	return New()
}

// Parse reads a traceparent header value as the specification's
// processing model says: version 00 is exactly
// "00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>" in lowercase, with
// neither id all zeros; a later version (but ff) is read for the same
// fields, which may be followed by "-" and more. Of the flags only sampled
// is kept, the one version 00 defines.
func Parse(v string) (Span, bool) {
	var s Span
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return s, false
	}
	var version [1]byte
	if !lowerHex(version[:], v[:2]) || version[0] == 0xff ||
		version[0] == 0 && len(v) != 55 || len(v) > 55 && v[55] != '-' {
		return s, false
	}
	var flags [1]byte
	if !lowerHex(s.TraceID[:], v[3:35]) || !lowerHex(s.SpanID[:], v[36:52]) || !lowerHex(flags[:], v[53:55]) ||
		s.TraceID == ([16]byte{}) || s.SpanID == ([8]byte{}) {
		return Span{}, false
	}
	s.Flags = flags[0] & sampled
	return s, true
}

// lowerHex decodes src, lowercase hex of exactly len(dst) bytes, into dst.
func lowerHex(dst []byte, src string) bool {
	for _, c := range []byte(src) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	n, err := hex.Decode(dst, []byte(src))
	return err == nil && n == len(dst)
}

// String is s as a traceparent header value (version 00).
func (s Span) String() string {
	b := make([]byte, 0, 55)
	b = append(b, "00-"...)
	b = hex.AppendEncode(b, s.TraceID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, s.SpanID[:])
	b = append(b, '-')
	b = hex.AppendEncode(b, []byte{s.Flags})
	return string(b)
}

// TraceIDString is the trace id in hex, as logs show it.
func (s Span) TraceIDString() string { return hex.EncodeToString(s.TraceID[:]) }

// SpanIDString is the span id in hex, as logs show it.
func (s Span) SpanIDString() string { return hex.EncodeToString(s.SpanID[:]) }

type spanKey struct{}

// NewContext returns ctx carrying s, the span of the request it serves.
func NewContext(ctx context.Context, s Span) context.Context {
	return context.WithValue(ctx, spanKey{}, s)
}

// FromContext returns the span ctx carries, if any.
func FromContext(ctx context.Context) (Span, bool) {
	s, ok := ctx.Value(spanKey{}).(Span)
	return s, ok
}

// Keep puts the span ctx carries, if any, into an item's attributes (Attr).
func Keep(ctx context.Context, attrs map[string]string) {
	if s, ok := FromContext(ctx); ok {
		attrs[Attr] = s.String()
	}
}

// Next is the traceparent of a request sent on behalf of a span kept as
// kept (Attr): a new span of its trace. It is "" when nothing valid was
// kept, and no header is sent.
func Next(kept string) string {
	s, ok := Parse(kept)
	if !ok {
		return ""
	}
	return s.Child().String()
}
