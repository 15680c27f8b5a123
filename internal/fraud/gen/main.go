// Command gen makes the fraud package's data files from git checkouts of
// their sources:
//
//	git clone https://github.com/lord-alfred/ipranges        /tmp/ipranges
//	git clone https://github.com/monperrus/crawler-user-agents /tmp/crawler-user-agents
//	TALLY_IPRANGES_DIR=/tmp/ipranges TALLY_CRAWLER_USER_AGENTS_DIR=/tmp/crawler-user-agents go generate ./internal/fraud
//
// data/datacenter-ranges.txt gets the merged CIDRs of the cloud and hosting
// providers in providers; data/bot-user-agents.txt the patterns of
// crawler-user-agents.json. Each file starts with its provenance: source,
// commit, commit date, licence. Review the diff before committing it: a
// provider that vanished upstream shows up as a whole section removed.
package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tally-hq/tally/internal/cidr"
	"github.com/tally-hq/tally/internal/fraud"
)

// providers are the folders of lord-alfred/ipranges whose ranges are
// datacenters: compute that rents servers by the hour. Left out on
// purpose: apple-proxy (iCloud Private Relay) and protonvpn carry real
// people; cloudflare includes its WARP users; facebook, twitter, telegram
// and github are platforms, not hosting; the crawler folders (googlebot,
// bing, openai, …) announce themselves in their User-Agent.
var providers = []string{"amazon", "google", "microsoft", "oracle", "digitalocean", "linode", "vultr"}

// specialPurpose are the IANA special-purpose address blocks (RFC 6890 and
// its updates): private, loopback, link-local, shared (CGNAT),
// documentation, benchmarking, 6to4, multicast and reserved space. No
// provider hosts servers there, yet some geofeeds list them (Vultr's has
// the documentation ranges), so they are dropped.
var specialPurpose = func() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range strings.Fields(`0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12
		192.0.0.0/24 192.0.2.0/24 192.88.99.0/24 192.168.0.0/16 198.18.0.0/15 198.51.100.0/24 203.0.113.0/24
		224.0.0.0/3 ::/8 64:ff9b::/96 100::/64 2001::/23 2001:db8::/32 2002::/16 3fff::/20 fc00::/7 fe80::/10 ff00::/8`) {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}()

func special(p netip.Prefix) bool {
	return slices.ContainsFunc(specialPurpose, func(sp netip.Prefix) bool { return sp.Overlaps(p) })
}

func main() {
	ranges := flag.String("ranges", "", "git checkout of github.com/lord-alfred/ipranges")
	agents := flag.String("agents", "", "git checkout of github.com/monperrus/crawler-user-agents")
	out := flag.String("out", "internal/fraud/data", "folder of the data files")
	flag.Parse()
	if *ranges == "" || *agents == "" {
		fmt.Fprintln(os.Stderr, "gen: give -ranges and -agents (git checkouts of the sources); see the package comment")
		os.Exit(2)
	}
	if err := run(*ranges, *agents, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(rangesDir, agentsDir, outDir string) error {
	dc, err := datacenters(rangesDir)
	if err != nil {
		return err
	}
	if err := write(filepath.Join(outDir, "datacenter-ranges.txt"), dc); err != nil {
		return err
	}
	bots, err := botPatterns(agentsDir)
	if err != nil {
		return err
	}
	return write(filepath.Join(outDir, "bot-user-agents.txt"), bots)
}

// write writes a data file, to read, and its gzip, which the package embeds
// (a fifth of the size, in every function that links the package).
func write(name string, data []byte) error {
	if err := os.WriteFile(name, data, 0o644); err != nil {
		return err
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return err
	}
	if _, err := zw.Write(data); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(name+".gz", gz.Bytes(), 0o644)
}

// provenance is the header of a data file: where it comes from, at which
// commit, under which licence.
func provenance(dir, repo, licence, what string) (string, error) {
	rev, err := exec.Command("git", "-C", dir, "log", "-1", "--format=%H %cs").Output()
	if err != nil {
		return "", fmt.Errorf("%s is not a git checkout of %s: %w", dir, repo, err)
	}
	commit, date, _ := strings.Cut(strings.TrimSpace(string(rev)), " ")
	return fmt.Sprintf("# %s\n# Source: %s, commit %s of %s.\n# Licence of the source: %s.\n"+
		"# Made by internal/fraud/gen (go generate ./internal/fraud); do not edit by hand.\n", what, repo, commit, date, licence), nil
}

func datacenters(dir string) ([]byte, error) {
	head, err := provenance(dir, "https://github.com/lord-alfred/ipranges", "CC0 1.0 Universal (public domain)",
		"Address ranges of cloud and hosting providers, merged per provider: "+strings.Join(providers, ", ")+".")
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(head)
	b.WriteString("# Each provider publishes its ranges (AWS ip-ranges.json, Google Cloud cloud.json and goog.txt,\n" +
		"# Azure service tags, Oracle public_ip_ranges.json, the geofeeds of DigitalOcean, Linode and Vultr);\n" +
		"# the source collects them daily. Special-purpose space (private, documentation, 6to4, …) is dropped.\n")
	total := 0
	for _, p := range providers {
		var cidrs []netip.Prefix
		for _, f := range []string{"ipv4_merged.txt", "ipv6_merged.txt"} {
			raw, err := os.ReadFile(filepath.Join(dir, p, f))
			if errors.Is(err, os.ErrNotExist) {
				continue // some providers publish no IPv6
			}
			if err != nil {
				return nil, err
			}
			for n, line := range strings.Split(string(raw), "\n") {
				line = strings.TrimSpace(line)
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				c, err := cidr.Parse(line)
				if err != nil {
					return nil, fmt.Errorf("%s/%s line %d: %w", p, f, n+1, err)
				}
				if special(c) {
					fmt.Fprintf(os.Stderr, "gen: %s/%s: dropped %s, special-purpose space\n", p, f, c)
					continue
				}
				cidrs = append(cidrs, c)
			}
		}
		if len(cidrs) == 0 {
			return nil, fmt.Errorf("%s: no ranges in %s", p, filepath.Join(dir, p))
		}
		slices.SortFunc(cidrs, func(a, b netip.Prefix) int {
			if c := a.Addr().Compare(b.Addr()); c != 0 {
				return c
			}
			return a.Bits() - b.Bits()
		})
		cidrs = slices.Compact(cidrs)
		fmt.Fprintf(&b, "\n# provider: %s (%d ranges)\n", p, len(cidrs))
		for _, c := range cidrs {
			b.WriteString(c.String() + "\n")
		}
		total += len(cidrs)
	}
	if total < 1000 {
		return nil, fmt.Errorf("only %d ranges: is %s the ipranges repository?", total, dir)
	}
	return b.Bytes(), nil
}

func botPatterns(dir string) ([]byte, error) {
	head, err := provenance(dir, "https://github.com/monperrus/crawler-user-agents", "MIT",
		"User-Agent patterns of bots and crawlers, one regular expression a line, from crawler-user-agents.json.")
	if err != nil {
		return nil, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "crawler-user-agents.json"))
	if err != nil {
		return nil, err
	}
	var list []struct {
		Pattern   string   `json:"pattern"`
		Instances []string `json:"instances"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("crawler-user-agents.json: %w", err)
	}
	var b bytes.Buffer
	b.WriteString(head)
	b.WriteString("# A pattern matches anywhere in the User-Agent, case as written (Go regexp syntax).\n")
	for _, c := range list {
		if strings.ContainsAny(c.Pattern, "\r\n") {
			return nil, fmt.Errorf("pattern %q spans lines", c.Pattern)
		}
		b.WriteString(c.Pattern + "\n")
	}
	// Every pattern must load, and must match the instances the source
	// gives for it.
	m, err := fraud.ParseBotMatcher(bytes.NewReader(b.Bytes()))
	if err != nil {
		return nil, err
	}
	for _, c := range list {
		for _, ua := range c.Instances {
			if !m.Match(ua) {
				return nil, fmt.Errorf("the patterns do not match %q, an instance of %q", ua, c.Pattern)
			}
		}
	}
	return b.Bytes(), nil
}
