package offers

import (
	"net/url"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/validate"
)

// FillMacros puts the click's values, query-escaped, into the offer's
// destination URL. It runs on every click, so it is one pass over the URL
// rather than a strings.Replacer built each time.
func FillMacros(dest string, c tally.Click) string {
	if !strings.Contains(dest, "{") {
		return dest
	}
	var b strings.Builder
	b.Grow(len(dest) + len(c.ID))
	for {
		before, name, after, found := nextMacro(dest)
		b.WriteString(before)
		if !found {
			return b.String()
		}
		if v, ok := macroValue(name, c); ok {
			b.WriteString(url.QueryEscape(v))
		} else { // not a macro: kept as written
			b.WriteByte('{')
			b.WriteString(name)
			b.WriteByte('}')
		}
		dest = after
	}
}

// nextMacro finds the first {name} in s whose name holds no brace, so that
// s is before + "{" + name + "}" + after; "{a{click_id}" holds {click_id}.
func nextMacro(s string) (before, name, after string, found bool) {
	open := strings.IndexByte(s, '{')
	if open < 0 {
		return s, "", "", false
	}
	end := strings.IndexByte(s[open:], '}')
	if end < 0 {
		return s, "", "", false
	}
	end += open
	open = strings.LastIndexByte(s[:end], '{')
	return s[:open], s[open+1 : end], s[end+1:], true
}

// checkDestinationMacros refuses a {name} in an offer's destination URL
// that FillMacros would not fill ({clickid}, {CLICK_ID}, another network's
// {aff_sub}): it would reach the landing page as written, and the
// conversion could not name its click. Braces around anything but a
// name ({} or JSON) are not a macro and stay as written.
func checkDestinationMacros(field string, dest *string) error {
	if dest == nil {
		return nil
	}
	for rest := *dest; ; {
		_, name, after, found := nextMacro(rest)
		if !found {
			return nil
		}
		if _, ok := macroValue(name, tally.Click{}); !ok && macroName(name) {
			return validate.InvalidField(field, "%s has {%s}, which is not a macro; the macros are {%s}.", field, name, strings.Join(destinationMacros, "}, {"))
		}
		rest = after
	}
}

// macroName reports whether s reads as a macro's name: letters, digits and
// underscores.
func macroName(s string) bool {
	return s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z')
	}) < 0
}

func macroValue(name string, c tally.Click) (string, bool) {
	switch name {
	case "click_id":
		return c.ID, true
	case "offer_id":
		return c.OfferID, true
	case "partner_id":
		return c.PartnerID, true
	case "sub1":
		return c.Sub1, true
	case "sub2":
		return c.Sub2, true
	case "sub3":
		return c.Sub3, true
	case "sub4":
		return c.Sub4, true
	case "sub5":
		return c.Sub5, true
	}
	return "", false
}

// destinationMacros are the names macroValue fills, for messages.
var destinationMacros = []string{"click_id", "offer_id", "partner_id", "sub1", "sub2", "sub3", "sub4", "sub5"}
