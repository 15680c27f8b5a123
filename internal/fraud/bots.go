package fraud

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"regexp/syntax"
	"strings"
)

// BotMatcher tells bot and crawler User-Agents from a list of regular
// expressions, each matched anywhere in the User-Agent, in any case: a
// crawler that writes its name in lower case is the same crawler.
//
// Running hundreds of expressions on every click would cost more than the
// rest of the click, so each expression is reduced to literals that every
// match must contain (for "Googlebot\/" that is "googlebot/"; for
// "(Ahrefs|Semrush)Bot" one of two). One pass over the lower-cased
// User-Agent looks the literals up by their first three bytes; only an
// expression one of whose literals is present is run.
type BotMatcher struct {
	patterns  []*regexp.Regexp
	byTrigram map[uint32][]needle
}

type needle struct {
	lit     string // lower case
	pattern int
}

// ParseBotMatcher reads one expression a line (Go syntax); blank lines and
// lines starting with # are skipped. Every expression must contain a
// literal of at least three bytes in each of its alternatives.
func ParseBotMatcher(r io.Reader) (*BotMatcher, error) {
	m := &BotMatcher{byTrigram: map[uint32][]needle{}}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		re, err := regexp.Compile("(?i)" + line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		parsed, err := syntax.Parse(line, syntax.Perl)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		lits := requiredLiterals(parsed.Simplify())
		if len(lits) == 0 || minLen(lits) < 3 {
			return nil, fmt.Errorf("line %d: %q has no literal of 3 bytes or more that every match contains", n, line)
		}
		for _, lit := range lits {
			k := trigram(lit)
			m.byTrigram[k] = append(m.byTrigram[k], needle{lit: lit, pattern: len(m.patterns)})
		}
		m.patterns = append(m.patterns, re)
	}
	return m, sc.Err()
}

// Len is the number of expressions.
func (m *BotMatcher) Len() int { return len(m.patterns) }

// Match reports whether userAgent matches one of the expressions.
func (m *BotMatcher) Match(userAgent string) bool {
	lower := strings.ToLower(userAgent)
	var tried map[int]bool
	for i := 0; i+3 <= len(lower); i++ {
		for _, nd := range m.byTrigram[trigram(lower[i:])] {
			if !strings.HasPrefix(lower[i:], nd.lit) || tried[nd.pattern] {
				continue
			}
			if m.patterns[nd.pattern].MatchString(userAgent) {
				return true
			}
			if tried == nil {
				tried = map[int]bool{}
			}
			tried[nd.pattern] = true
		}
	}
	return false
}

func trigram(s string) uint32 { return uint32(s[0])<<16 | uint32(s[1])<<8 | uint32(s[2]) }

// requiredLiterals returns lower-cased strings at least one of which every
// match of re contains, or nil when it finds none. Of the choices a
// concatenation offers, it keeps the one whose shortest literal is longest.
func requiredLiterals(re *syntax.Regexp) []string {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{strings.ToLower(string(re.Rune))}
	case syntax.OpCapture, syntax.OpPlus:
		return requiredLiterals(re.Sub[0])
	case syntax.OpRepeat:
		if re.Min >= 1 {
			return requiredLiterals(re.Sub[0])
		}
	case syntax.OpAlternate:
		var out []string
		for _, sub := range re.Sub {
			lits := requiredLiterals(sub)
			if lits == nil {
				return nil // this alternative can match without any literal
			}
			out = append(out, lits...)
		}
		return out
	case syntax.OpConcat:
		var best []string
		keep := func(lits []string) {
			if len(lits) > 0 && (best == nil || minLen(lits) > minLen(best)) {
				best = lits
			}
		}
		run := "" // adjacent literals make one longer literal
		for _, sub := range re.Sub {
			if sub.Op == syntax.OpLiteral {
				run += strings.ToLower(string(sub.Rune))
				continue
			}
			if run != "" {
				keep([]string{run})
				run = ""
			}
			keep(requiredLiterals(sub))
		}
		if run != "" {
			keep([]string{run})
		}
		return best
	}
	return nil
}

func minLen(lits []string) int {
	n := len(lits[0])
	for _, l := range lits[1:] {
		n = min(n, len(l))
	}
	return n
}
