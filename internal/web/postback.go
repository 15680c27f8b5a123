package web

import (
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
)

// PostbackForm is the form that sets a partner's postback (the template
// "postback-form"): on the dashboard's partner page and on the partner
// portal's Postback page.
type PostbackForm struct {
	Action string // where it posts
	CSRF   string
	Exists bool // a postback is set: the form changes it
	URL    string
	// Checked are the events ticked.
	Checked []string
	Errors  map[string]string // by field: url, events
}

// Macros are what the URL template may hold.
func (PostbackForm) Macros() []string { return endpoints.PostbackMacros() }

// Events are the events a postback may fire on.
func (PostbackForm) Events() []string { return endpoints.PostbackEvents() }

// PostbackMessage says a postback error in the form's words.
func PostbackMessage(err error) string {
	msg := tally.ErrorMessage(err)
	if strings.HasPrefix(msg, "events must name at least one event") {
		return "Tick at least one event."
	}
	if rest, ok := strings.CutPrefix(msg, "url"); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, ":")) {
		return "URL" + rest
	}
	return msg
}
