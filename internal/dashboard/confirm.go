package dashboard

import (
	"net/http"
	"net/url"
)

// confirmation is the step between a button that acts at once and cannot
// be undone (ban, reject, revoke, delete) and the action itself: the
// button's form posts to the action, which answers with this page instead
// of acting; its own form posts again to the same address with confirm=yes
// and the CSRF token. It needs no JavaScript, and a form that skips it
// changes nothing.
type confirmation struct {
	Active  string // the nav item the page belongs to
	Heading string // a question: "Ban Pat Reviews?"
	Message string // what follows, and whether it can be undone
	Button  string // the confirming button's label: "Ban the partner"
	Cancel  string // where Cancel goes: the page the button was on

	// Filled in by confirmed.
	Action, Back string
}

// confirmed reports whether the request carries the confirmation step's
// answer. When it does not, it renders the confirmation page, and the
// caller returns without acting. A form's back field (where to return
// after the action) is carried through, and is where Cancel goes too.
func confirmed(w http.ResponseWriter, r *request, c confirmation) bool {
	if r.PostFormValue("confirm") == "yes" {
		return true
	}
	c.Action = r.URL.Path
	if b := r.PostFormValue("back"); b != "" && localNext(b) == b {
		c.Back, c.Cancel = b, b
	}
	render(w, "confirm", r.view(c.Heading, c.Active, c))
	return false
}

// withoutNotice is a page's address without the notice a redirect put on
// it (?done=…&n=…), so that a form returning there shows its own notice
// only.
func withoutNotice(to string) string {
	u, err := url.Parse(to)
	if err != nil {
		return to
	}
	q := u.Query()
	if !q.Has("done") && !q.Has("n") {
		return to
	}
	q.Del("done")
	q.Del("n")
	u.RawQuery = q.Encode()
	return u.String()
}
