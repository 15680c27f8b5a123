package fraud

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"

	"github.com/tally-hq/tally/internal/cidr"
)

// IPSet is a set of address ranges, IPv4 and IPv6, kept as sorted,
// disjoint intervals so that Contains is a binary search.
type IPSet struct {
	v4 []span[uint32]
	v6 []span[u128]
}

type u128 struct{ hi, lo uint64 }

func (a u128) cmp(b u128) int { return cmp.Or(cmp.Compare(a.hi, b.hi), cmp.Compare(a.lo, b.lo)) }

type span[T any] struct{ first, last T }

// NewIPSet returns the set of the addresses in prefixes.
func NewIPSet(prefixes []netip.Prefix) *IPSet {
	s := &IPSet{}
	for _, p := range prefixes {
		p = p.Masked()
		first, last := p.Addr(), lastAddr(p)
		if first.Is4() {
			s.v4 = append(s.v4, span[uint32]{v4(first), v4(last)})
		} else {
			s.v6 = append(s.v6, span[u128]{v6(first), v6(last)})
		}
	}
	s.v4 = merge(s.v4, cmp.Compare[uint32], func(a uint32) uint32 { return a + 1 })
	s.v6 = merge(s.v6, u128.cmp, func(a u128) u128 {
		if a.lo == ^uint64(0) {
			return u128{a.hi + 1, 0}
		}
		return u128{a.hi, a.lo + 1}
	})
	return s
}

// ParseIPSet reads one CIDR (or single address) a line; blank lines and
// lines starting with # are skipped.
func ParseIPSet(r io.Reader) (*IPSet, error) {
	var prefixes []netip.Prefix
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p, err := cidr.Parse(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		prefixes = append(prefixes, p)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return NewIPSet(prefixes), nil
}

// Contains reports whether a is in the set. IPv4-mapped IPv6 addresses are
// looked up as IPv4.
func (s *IPSet) Contains(a netip.Addr) bool {
	a = a.Unmap()
	switch {
	case a.Is4():
		return contains(s.v4, v4(a), cmp.Compare[uint32])
	case a.Is6():
		return contains(s.v6, v6(a), u128.cmp)
	}
	return false
}

// Len is the number of disjoint ranges in the set.
func (s *IPSet) Len() int { return len(s.v4) + len(s.v6) }

func contains[T any](spans []span[T], x T, compare func(a, b T) int) bool {
	// The first span whose last address is at or after x holds x, if any does.
	i, _ := slices.BinarySearchFunc(spans, x, func(sp span[T], x T) int { return compare(sp.last, x) })
	return i < len(spans) && compare(spans[i].first, x) <= 0
}

// merge sorts spans and joins those that overlap or touch.
func merge[T any](spans []span[T], compare func(a, b T) int, next func(T) T) []span[T] {
	slices.SortFunc(spans, func(a, b span[T]) int { return compare(a.first, b.first) })
	out := spans[:0]
	for _, sp := range spans {
		if n := len(out); n > 0 {
			last := &out[n-1]
			// Overlapping, or adjacent (sp starts right after last ends;
			// next would wrap past the top address, where compare is never 0).
			if compare(sp.first, last.last) <= 0 || compare(sp.first, next(last.last)) == 0 {
				if compare(sp.last, last.last) > 0 {
					last.last = sp.last
				}
				continue
			}
		}
		out = append(out, sp)
	}
	return slices.Clip(out)
}

func v4(a netip.Addr) uint32 {
	b := a.As4()
	return binary.BigEndian.Uint32(b[:])
}

func v6(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// lastAddr is the highest address of a masked prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
