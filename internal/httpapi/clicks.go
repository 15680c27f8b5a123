package httpapi

import (
	"errors"
	"fmt"
	"html"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/identity"
)

// clickParams are the query parameters a tracking link reads. Others are
// ignored: ad platforms append their own (utm_*, gclid, …) to links.
var clickParams = []string{"pid", "sub1", "sub2", "sub3", "sub4", "sub5"}

// clickQuery reads a tracking link's parameters. A malformed pair of one
// it reads (a bad percent-escape, a ';' that was meant as '&') answers 422
// rather than being dropped, as url.ParseQuery would, which stored the
// click without its sub or lost its partner; malformed pairs of other
// parameters are ignored like the parameters themselves.
func clickQuery(raw string) (url.Values, error) {
	q := make(url.Values, 2)
	for raw != "" {
		var pair string
		pair, raw, _ = strings.Cut(raw, "&")
		k, v, _ := strings.Cut(pair, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || !slices.Contains(clickParams, name) {
			continue
		}
		if len(q[name]) > 0 {
			return nil, tally.Errorf(tally.ECodeValidation, "Query parameter %q is given more than once.", name)
		}
		if strings.Contains(v, ";") {
			return nil, tally.Errorf(tally.ECodeValidation, "Query parameter %q contains ';': separate parameters with '&', and write a ';' in a value as %%3B.", name)
		}
		value, err := url.QueryUnescape(v)
		if err != nil {
			return nil, tally.Errorf(tally.ECodeValidation, "Query parameter %q is not percent-encoded correctly (%v); write a '%%' in a value as %%25.", name, err)
		}
		q[name] = append(q[name], value)
	}
	return q, nil
}

// click serves the tracking link: it records the click and redirects the
// visitor to the offer's destination. A link the offer does not serve now
// redirects to the offer's fallback URL, when it has one; otherwise, and
// for a link that cannot be served at all, a browser (which asks for HTML)
// gets a page a visitor can read and a program the error shape. A
// click past ClickRateLimit is redirected all the same, untracked: the
// visitor is a person (or one behind an address many share) who followed
// a link, and an error page would lose the brand the visit; an abuser
// gains nothing from it, and costs no write.
func (a *API) click(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	w.Header().Set("Cache-Control", "no-store")
	err := a.followLink(w, r)
	if err == nil || !prefersHTML(r.Header.Get("Accept")) {
		return err
	}
	visitorPage(w, r, err)
	return nil
}

// followLink records the click and redirects, or answers why not.
func (a *API) followLink(w http.ResponseWriter, r *http.Request) error {
	q, err := clickQuery(r.URL.RawQuery)
	if err != nil {
		return err
	}
	in := clicks.ClickInput{
		OfferID:   r.PathValue("offerId"),
		PartnerID: q.Get("pid"),
		Subs:      [5]string{q.Get("sub1"), q.Get("sub2"), q.Get("sub3"), q.Get("sub4"), q.Get("sub5")},
		IP:        a.clientAddr(r),
		UserAgent: r.Header.Get("User-Agent"),
		Referer:   r.Header.Get("Referer"),
		Limit:     a.cfg.ClickRateLimit,
	}
	_, location, err := a.svc.Clicks.RecordClick(r.Context(), in)
	var ns *clicks.NotServed
	switch {
	case errors.As(err, &ns) && ns.Fallback != "":
		location = ns.Fallback
	case err != nil && err != clicks.ErrOverLimit:
		return err
	}
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusFound)
	return nil
}

func (a *API) listClicks(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, lp, err := listQuery(r, "offerId", "partnerId", "minScore", "from", "to")
	if err != nil {
		return err
	}
	f := clicks.ClickFilter{OfferID: q.Get("offerId"), PartnerID: q.Get("partnerId"), MinScore: q.Get("minScore"), From: q.Get("from"), To: q.Get("to")}
	clicks, next, err := a.svc.Clicks.Clicks(r.Context(), p.BrandID, f, lp)
	if err != nil {
		return err
	}
	writeList(w, clicks, next)
	return nil
}

func (a *API) fraudSettings(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	if _, err := query(r); err != nil {
		return err
	}
	settings, err := a.svc.Clicks.FraudSettings(r.Context(), p.BrandID)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, settings)
	return nil
}

func (a *API) updateFraudSettings(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	var in clicks.FraudSettingsInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	settings, err := a.svc.Clicks.UpdateFraudSettings(r.Context(), p.BrandID, in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, settings)
	return nil
}

// prefersHTML reports whether an Accept header asks for HTML before JSON,
// as a browser's does: the first of text/html and application/json it
// lists (with a non-zero q) wins.
func prefersHTML(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" || params["q"] == "0.0" {
			continue
		}
		switch mt {
		case "text/html":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

// visitorPageFormat is what a visitor who followed a link that leads
// nowhere reads: the partner's audience, who know nothing of offers or
// partners. No style: the page stands alone, under a policy that loads
// nothing. A format, not html/template: that package would add 3.4 MiB to
// every API function (docs/aws.md, "Small, fast Lambdas").
const visitorPageFormat = `<!doctype html>
<html lang="en">
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%[1]s</title>
<h1>%[1]s</h1>
<p>%[2]s</p>
`

// visitorPage answers a link that is not served with a page for the
// visitor, with the status the error shape would have.
func visitorPage(w http.ResponseWriter, r *http.Request, err error) {
	status, _ := ErrorBody(err)
	if status == http.StatusInternalServerError {
		logger(r.Context()).Error("internal error", "err", err.Error())
	}
	page := struct{ Title, Text string }{"This offer is not available", "The link you followed does not lead to an offer right now. It may have ended; please check back later."}
	switch {
	case status == http.StatusInternalServerError:
		page.Title, page.Text = "Something went wrong", "The link could not be followed just now. Please try again in a moment."
	case status != http.StatusNotFound:
		page.Title, page.Text = "This link is not complete", "The link you followed was changed or cut short on its way here. Please go back and follow it again."
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	fmt.Fprintf(w, visitorPageFormat, html.EscapeString(page.Title), html.EscapeString(page.Text))
}
