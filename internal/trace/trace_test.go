package trace

import (
	"strings"
	"testing"
)

const (
	traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	spanID  = "00f067aa0ba902b7"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   string // the span as read, "" when invalid
	}{
		{"00-" + traceID + "-" + spanID + "-01", "00-" + traceID + "-" + spanID + "-01"},
		{"00-" + traceID + "-" + spanID + "-00", "00-" + traceID + "-" + spanID + "-00"},
		{"00-" + traceID + "-" + spanID + "-03", "00-" + traceID + "-" + spanID + "-01"}, // flags version 00 does not define are not passed on
		{"01-" + traceID + "-" + spanID + "-01", "00-" + traceID + "-" + spanID + "-01"},
		{"cc-" + traceID + "-" + spanID + "-01-later", "00-" + traceID + "-" + spanID + "-01"},
		{"cc-" + traceID + "-" + spanID + "-01later", ""},
		{"00-" + traceID + "-" + spanID + "-01-later", ""},
		{"ff-" + traceID + "-" + spanID + "-01", ""},
		{"00-" + strings.ToUpper(traceID) + "-" + spanID + "-01", ""},
		{"00-" + traceID + "-" + spanID + "-0A", ""},
		{"0-" + traceID + "-" + spanID + "-01", ""},
		{"00-" + strings.Repeat("0", 32) + "-" + spanID + "-01", ""},
		{"00-" + traceID + "-" + strings.Repeat("0", 16) + "-01", ""},
		{"00-" + traceID[:31] + "g-" + spanID + "-01", ""},
		{"00_" + traceID + "_" + spanID + "_01", ""},
		{"00-" + traceID + "-" + spanID + "-1", ""},
		{"", ""},
	} {
		s, ok := Parse(tc.header)
		if got := map[bool]string{true: s.String(), false: ""}[ok]; got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q", tc.header, got, ok, tc.want)
		}
	}
}

func TestContinue(t *testing.T) {
	caller := "00-" + traceID + "-" + spanID + "-01"
	s := Continue([]string{caller})
	if s.TraceIDString() != traceID || s.SpanIDString() == spanID || s.Flags != sampled {
		t.Errorf("Continue(%q) = %s, want a new span of its trace", caller, s)
	}
	for _, values := range [][]string{nil, {caller, caller}, {"00-" + traceID}} {
		if s := Continue(values); s.TraceIDString() == traceID || s.Flags != sampled {
			t.Errorf("Continue(%q) = %s, want a new sampled trace", values, s)
		}
	}
	if next := Next(caller); next[:36] != caller[:36] || next[52:] != "-01" || next == caller {
		t.Errorf("Next(%q) = %q, want a new span of its trace", caller, next)
	}
	if next := Next(""); next != "" {
		t.Errorf("Next of nothing kept = %q, want none", next)
	}
}
