// Package ssrf keeps Tally from being made to send requests inside its own
// network: which receiver URLs a subscription or a postback may name, and
// which addresses a delivery may connect to once the name is resolved.
package ssrf

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"unicode"

	"github.com/tally-hq/tally"
)

// MaxURLLength is the longest receiver URL CheckURL accepts.
const MaxURLLength = 2048

// ErrBlocked is wrapped by every refusal of the SSRF guard; delivery's
// Sender.Send reports it as tally.AttemptBlocked.
var ErrBlocked = errors.New("ssrf: receiver address not allowed")

// blockedPrefixes are the IPv4 and IPv6 ranges no receiver may be at, on top
// of loopback (allowed only on the local server). IPv4-mapped IPv6
// addresses are unmapped before the check; NAT64 and 6to4 addresses are
// checked by the IPv4 address they embed.
var blockedPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network", incl. the unspecified 0.0.0.0
		"10.0.0.0/8",     // private
		"100.64.0.0/10",  // carrier-grade NAT (shared address space)
		"169.254.0.0/16", // link-local, incl. the 169.254.169.254 metadata service
		"172.16.0.0/12",  // private
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // private
		"198.18.0.0/15",  // benchmarking
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, incl. broadcast 255.255.255.255
		"::/96",          // unspecified, IPv4-compatible (deprecated); ::1 is handled as loopback
		"64:ff9b:1::/48", // local-use NAT64
		"fc00::/7",       // unique local, incl. the AWS metadata service fd00:ec2::254
		"fe80::/10",      // link-local
		"fec0::/10",      // site-local (deprecated)
		"ff00::/8",       // multicast
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	// awsMetadataV6 is inside fc00::/7; it is named for the tests and for
	// anyone reading this list.
	awsMetadataV6 = netip.MustParseAddr("fd00:ec2::254")
)

// blockedIP reports whether a receiver may not be at ip: loopback (unless
// allowLoopback), private, link-local, metadata, unspecified, multicast,
// CGNAT and reserved addresses, in IPv4, IPv6 and IPv4-mapped form.
func blockedIP(ip netip.Addr, allowLoopback bool) bool {
	if !ip.IsValid() {
		return true
	}
	ip = ip.WithZone("").Unmap()
	if ip.IsLoopback() {
		return !allowLoopback
	}
	if ip == awsMetadataV6 || ip.IsUnspecified() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsMulticast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() {
		return true
	}
	for _, p := range blockedPrefixes {
		if p.Contains(ip) {
			return true
		}
	}
	// Addresses that carry an IPv4 address: judge the embedded one (a NAT64
	// gateway would connect to it). Loopback is never fine through them.
	if nat64.Contains(ip) {
		b := ip.As16()
		return blockedIP(netip.AddrFrom4([4]byte(b[12:16])), false)
	}
	if sixToFour.Contains(ip) {
		b := ip.As16()
		return blockedIP(netip.AddrFrom4([4]byte(b[2:6])), false)
	}
	return false
}

// Control returns a net.Dialer Control hook that checks the address actually
// being dialed (after name resolution, so DNS rebinding cannot slip past a
// check of the name). loopbackOnly is for plain-http connections, which are
// allowed to loopback receivers only.
func Control(allowLoopback, loopbackOnly bool) func(network, address string, _ syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse %q", ErrBlocked, address)
		}
		ip := ap.Addr().Unmap()
		if loopbackOnly && !(allowLoopback && ip.IsLoopback()) {
			return fmt.Errorf("%w: %s (plain http only to loopback on the local server)", ErrBlocked, ip)
		}
		if blockedIP(ip, allowLoopback) {
			return fmt.Errorf("%w: %s", ErrBlocked, ip)
		}
		return nil
	}
}

// isLoopbackHost reports whether host (a URL's Hostname) is a loopback IP
// literal or a localhost name (RFC 6761).
func isLoopbackHost(host string) bool {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().IsLoopback()
	}
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return h == "localhost" || strings.HasSuffix(h, ".localhost")
}

// CheckURL vets a webhook receiver URL when a subscription is created: an
// absolute https URL with a host and no user name or password, or, when
// allowLoopback (the local server), also http to a loopback host
// (127.0.0.0/8, ::1, localhost). IP literals in refused ranges are refused
// here already; names are checked again on the resolved address at every
// delivery. Errors are *tally.Error with code validation_error.
func CheckURL(raw string, allowLoopback bool) error {
	if err := Check(raw, allowLoopback); err != nil {
		return tally.Errorf(tally.ECodeValidation, "%s", err.Error())
	}
	return nil
}

// urlError is a CheckURL refusal in words; CheckURL turns it into a
// *tally.Error.
type urlError string

func (e urlError) Error() string { return string(e) }

func Check(raw string, allowLoopback bool) error {
	httpsOnly := urlError("url must be an absolute https URL, such as https://example.com/webhooks.")
	if allowLoopback {
		httpsOnly = urlError("url must be an absolute https URL, or an http URL to a loopback host (localhost, 127.0.0.1, [::1]).")
	}
	if raw == "" {
		return urlError("url is required.")
	}
	if len(raw) > MaxURLLength {
		return urlError("url must be at most " + strconv.Itoa(MaxURLLength) + " characters.")
	}
	if strings.TrimSpace(raw) != raw {
		return urlError("url must not start or end with whitespace.")
	}
	if err := rawCharacters(raw); err != nil {
		return err
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || !u.IsAbs() {
		return httpsOnly
	}
	host := u.Hostname()
	switch u.Scheme {
	case "https":
	case "http":
		if !allowLoopback || host == "" || !isLoopbackHost(host) {
			return httpsOnly
		}
	default:
		return httpsOnly
	}
	if u.User != nil {
		return urlError("url must not contain a user name or password.")
	}
	if host == "" {
		return urlError("url must include a host.")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return urlError("url has an invalid port.")
		}
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if blockedIP(ip, allowLoopback) {
			return urlError("url must not point to a private, loopback, link-local, metadata or other reserved address.")
		}
		return nil
	}
	switch {
	case !allowLoopback && isLoopbackHost(host):
		return urlError("url must not point to a loopback host.")
	case endsInNumber(host):
		return urlError("url must name its host, or give an IP address in standard form (IPv4 as four decimal numbers, such as 203.0.113.7).")
	case isPrivateName(host):
		return urlError("url must not point to a cloud metadata service or a name of a private network (.internal, .local).")
	}
	return nil
}

// rawCharacters refuses the characters a URL may not hold unencoded (RFC
// 3986): net/url parses a URL with them, and the request line would carry
// them as given, so a space would end the request target early and let the
// rest pass for the protocol version. Letters beyond ASCII may stand raw
// (the client encodes them).
func rawCharacters(raw string) error {
	for _, r := range raw {
		switch {
		case r == ' ':
			return urlError("url must not contain spaces: percent-encode them as %20.")
		case unicode.IsControl(r) || unicode.IsSpace(r):
			return urlError(fmt.Sprintf("url must not contain control characters or spaces (%U): percent-encode them.", r))
		case strings.ContainsRune(`"<>\^`+"`{|}", r):
			return urlError(fmt.Sprintf("url must not contain a raw %c: percent-encode it as %%%02X.", r, r))
		}
	}
	return nil
}

// endsInNumber reports whether a host that is not an IP address in standard
// form would still be read as an IPv4 address by a browser or a resolver
// (the WHATWG URL standard's "ends in a number" rule): its last label is
// decimal digits or 0x-prefixed hex. That covers 2852039166, 0xa9fea9fe,
// 012.0.0.1 (octal) and 127.1. Such forms exist to slip past address
// checks; a real receiver names its host or writes its address plainly.
func endsInNumber(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := labels[len(labels)-1]
	if last == "" {
		return false
	}
	if hex, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// isPrivateName reports whether host names a cloud metadata service or lies
// under a suffix reserved for private networks (RFC 6762 .local; .internal,
// which ICANN reserved for private use in 2024 and which Google Cloud's
// metadata.google.internal uses).
func isPrivateName(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	switch h {
	case "metadata", "metadata.goog", "metadata.google.internal", "instance-data":
		return true
	}
	return strings.HasSuffix(h, ".internal") || strings.HasSuffix(h, ".local")
}
