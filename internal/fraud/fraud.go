// Package fraud scores clicks: it knows the address ranges of cloud and
// hosting providers and the User-Agents of bots and crawlers, and weighs
// the signals a click raises into a score from 0 to 100.
//
// Both lists are snapshots of maintained public sources, kept in data/
// with their provenance in each file's header and embedded gzipped (every
// API function links this package: 32 KB instead of 124 KB); `go generate`
// (see gen/) makes both again from fresh copies of the sources.
package fraud

import (
	"bytes"
	"compress/gzip"
	_ "embed"
	"io"
	"net/netip"
	"strings"
	"sync"

	"github.com/tally-hq/tally"
)

//go:generate go run ./gen -ranges $TALLY_IPRANGES_DIR -agents $TALLY_CRAWLER_USER_AGENTS_DIR -out data

var (
	//go:embed data/datacenter-ranges.txt.gz
	datacenterRanges []byte
	//go:embed data/bot-user-agents.txt.gz
	botUserAgents []byte
)

// Datacenters are the published address ranges of cloud and hosting
// providers (data/datacenter-ranges.txt), parsed on first use.
var Datacenters = sync.OnceValue(func() *IPSet {
	s, err := ParseIPSet(gunzip(datacenterRanges))
	if err != nil {
		panic("fraud: data/datacenter-ranges.txt: " + err.Error()) // the tests read it; it cannot fail at run time
	}
	return s
})

// Bots matches the User-Agents of known bots and crawlers
// (data/bot-user-agents.txt), parsed on first use.
var Bots = sync.OnceValue(func() *BotMatcher {
	m, err := ParseBotMatcher(gunzip(botUserAgents))
	if err != nil {
		panic("fraud: data/bot-user-agents.txt: " + err.Error())
	}
	return m
})

// gunzip reads an embedded data file. The tests read every file, so a
// corrupt one fails them, not a click.
func gunzip(gz []byte) io.Reader {
	r, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		panic("fraud: an embedded data file: " + err.Error())
	}
	return r
}

// Weights are what each signal adds to a click's score. A brand's own
// blocklist is proof enough; a bot's User-Agent nearly so; a datacenter
// address, a missing User-Agent or a burst of clicks alone are not (VPNs,
// privacy tools and shared addresses explain them), but any two of them
// are high-risk at the default threshold of 70.
var Weights = map[string]int{
	tally.SignalBlockedIP:        100,
	tally.SignalBotUserAgent:     80,
	tally.SignalDatacenterIP:     50,
	tally.SignalMissingUserAgent: 40,
	tally.SignalIPVelocity:       40,
}

// Visitor is what a click says about who made it.
type Visitor struct {
	IP        netip.Addr
	UserAgent string
	Blocked   *IPSet // the brand's blocklist; nil is empty
	Burst     bool   // too many clicks from this IP on this offer just now
}

// Signals returns the signals the visitor raises, always in the order
// datacenter_ip, blocked_ip, bot_user_agent, missing_user_agent,
// ip_velocity; never nil. A User-Agent of only spaces is missing.
func Signals(v Visitor) []string {
	out := []string{}
	add := func(raised bool, signal string) {
		if raised {
			out = append(out, signal)
		}
	}
	add(v.IP.IsValid() && Datacenters().Contains(v.IP), tally.SignalDatacenterIP)
	add(v.IP.IsValid() && v.Blocked != nil && v.Blocked.Contains(v.IP), tally.SignalBlockedIP)
	missing := strings.TrimSpace(v.UserAgent) == ""
	add(!missing && Bots().Match(v.UserAgent), tally.SignalBotUserAgent)
	add(missing, tally.SignalMissingUserAgent)
	add(v.Burst, tally.SignalIPVelocity)
	return out
}

// Score sums the weights of signals, capped at 100.
func Score(signals []string) int {
	score := 0
	for _, s := range signals {
		score += Weights[s]
	}
	return min(score, 100)
}
