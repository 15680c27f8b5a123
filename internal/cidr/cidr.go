// Package cidr reads address ranges as operators and brands write them.
package cidr

import (
	"fmt"
	"net/netip"
	"strings"
)

// Parse reads a CIDR such as 203.0.113.0/24 or 2001:db8::/32, or a
// single address (a /32 or /128). IPv4-mapped IPv6 addresses count as IPv4.
// A zone (fe80::1%eth0) and a mapped range wider than the mapped space
// (::ffff:198.51.100.0/80) are refused: neither could ever match a client
// address, which is looked up without a zone and unmapped.
func Parse(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, err
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("cidr: %q: an address range has no zone", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	if a := p.Addr(); a.Is4In6() {
		if p.Bits() < 96 {
			return netip.Prefix{}, fmt.Errorf("cidr: %q: write an IPv4 range as IPv4", s)
		}
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), nil
}
