package ratelimit

import (
	"strconv"
	"testing"
	"time"
)

// The windows remembered stay within their bound, the ended ones
// forgotten first.
func TestRememberedWindowsAreBounded(t *testing.T) {
	f := newWindows(100)
	start := time.Unix(1_800_000_000, 0)
	key := func(i int, window time.Time) windowKey {
		return windowKey{bucket: "ip:" + strconv.Itoa(i), window: window.UnixNano(), per: time.Minute, limit: 10}
	}
	for i := range 100 {
		f.mark(key(i, start), start.Add(time.Minute), 0)
	}
	next := start.Add(time.Minute)
	for i := range 1_000 {
		f.mark(key(i, next), next.Add(time.Minute), 0)
		if len(f.m) > 100 {
			t.Fatalf("after %d more: %d windows remembered, want at most 100", i+1, len(f.m))
		}
	}
	if f.get(key(0, start)) != 0 {
		t.Errorf("an ended window is still remembered")
	}
	if f.get(key(999, next)) != 1 {
		t.Errorf("the window just marked is forgotten")
	}
}
