package httpapi

import (
	"context"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/identity"
	"github.com/tally-hq/tally/internal/partners"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/reports"
)

// query returns the request's query parameters after checking that the
// query string is well formed, and that each parameter is one the endpoint
// knows, appears once and is valid UTF-8, so typos fail loudly instead of
// silently widening a list (url.URL.Query would drop a malformed pair).
func query(r *http.Request, known ...string) (url.Values, error) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, tally.Errorf(tally.ECodeValidation, "The query string is malformed: %v.", err)
	}
	for name, vs := range q {
		if !slices.Contains(known, name) {
			return nil, tally.Errorf(tally.ECodeValidation, "Unknown query parameter %q.", name)
		}
		if len(vs) > 1 {
			return nil, tally.Errorf(tally.ECodeValidation, "Query parameter %q is given more than once.", name)
		}
		if !utf8.ValidString(vs[0]) {
			return nil, tally.Errorf(tally.ECodeValidation, "Query parameter %q is not valid UTF-8.", name)
		}
	}
	return q, nil
}

// listQuery reads the paging parameters plus the endpoint's filters.
func listQuery(r *http.Request, filters ...string) (url.Values, records.ListParams, error) {
	q, err := query(r, append(filters, "limit", "cursor")...)
	if err != nil {
		return nil, records.ListParams{}, err
	}
	p := records.ListParams{Cursor: q.Get("cursor")}
	if s := q.Get("limit"); s != "" {
		if p.Limit, err = strconv.Atoi(s); err != nil || p.Limit < 1 {
			return nil, p, tally.Errorf(tally.ECodeValidation, "limit must be an integer from 1 to %d.", records.MaxLimit)
		}
	}
	return q, p, nil
}

func (a *API) listPartners(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, lp, err := listQuery(r, "status")
	if err != nil {
		return err
	}
	partners, next, err := a.svc.Partners.Partners(r.Context(), p.BrandID, q.Get("status"), lp)
	if err != nil {
		return err
	}
	writeList(w, partners, next)
	return nil
}

// created serves a POST that creates one of the brand's records from the
// body (read with decode: decodeBody, or decodeOptionalBody when every
// field is optional) and answers 201 with it.
func created[In, Out any](decode func(http.ResponseWriter, *http.Request, any) error, create func(ctx context.Context, brandID string, in In) (Out, error)) func(http.ResponseWriter, *http.Request, identity.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		var in In
		if err := decode(w, r, &in); err != nil {
			return err
		}
		v, err := create(r.Context(), p.BrandID, in)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusCreated, v)
		return nil
	}
}

// listed serves a GET of one of the brand's lists that takes no filters.
func listed[T any](list func(ctx context.Context, brandID string, p records.ListParams) ([]T, string, error)) func(http.ResponseWriter, *http.Request, identity.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		_, lp, err := listQuery(r)
		if err != nil {
			return err
		}
		items, next, err := list(r.Context(), p.BrandID, lp)
		if err != nil {
			return err
		}
		writeList(w, items, next)
		return nil
	}
}

// byIDWithBody serves a route that changes one of the brand's records, named
// by {id}, as the JSON body says (read with decode: decodeBody, or
// decodePatch for a PATCH), and answers 200 with the outcome.
func byIDWithBody[In, Out any](decode func(http.ResponseWriter, *http.Request, any) error, do func(ctx context.Context, brandID, id string, in In) (Out, error)) func(http.ResponseWriter, *http.Request, identity.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		var in In
		if err := decode(w, r, &in); err != nil {
			return err
		}
		v, err := do(r.Context(), p.BrandID, r.PathValue("id"), in)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}

// sendTest serves a route that emits a test event for one of the brand's
// endpoints, named by {id}, and answers 202 with the event: its delivery
// follows.
func sendTest(send func(ctx context.Context, brandID, id string) (tally.Event, error)) func(http.ResponseWriter, *http.Request, identity.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		if _, err := query(r); err != nil {
			return err
		}
		evt, err := send(r.Context(), p.BrandID, r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusAccepted, evt)
		return nil
	}
}

// byID serves a route that names one of the brand's records by {id}: it
// reads the record, deletes it, or moves it to another state, and answers
// with the record.
func byID[T any](do func(ctx context.Context, brandID, id string) (T, error)) func(http.ResponseWriter, *http.Request, identity.Principal) error {
	return func(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
		if _, err := query(r); err != nil {
			return err
		}
		v, err := do(r.Context(), p.BrandID, r.PathValue("id"))
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}

func (a *API) createConversion(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	var in conversions.ConversionInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	c, created, err := a.svc.Conversions.RecordConversion(r.Context(), p.BrandID, in)
	if err != nil {
		return err
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeConversion(w, status, &c)
	return nil
}

func (a *API) listConversions(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, lp, err := listQuery(r, "status", "offerId", "partnerId", "externalTxnId", "from", "to")
	if err != nil {
		return err
	}
	f := conversions.ConversionFilter{
		Status: q.Get("status"), OfferID: q.Get("offerId"), PartnerID: q.Get("partnerId"),
		ExternalTxnID: q.Get("externalTxnId"), From: q.Get("from"), To: q.Get("to"),
	}
	cs, next, err := a.svc.Conversions.Conversions(r.Context(), p.BrandID, f, lp)
	if err != nil {
		return err
	}
	writeList(w, cs, next)
	return nil
}

func (a *API) report(w http.ResponseWriter, r *http.Request, p identity.Principal) error {
	q, err := query(r, "from", "to", "offerId", "partnerId", "groupBy", "timezone", "format")
	if err != nil {
		return err
	}
	format, err := answerFormat(r, q)
	if err != nil {
		return err
	}
	rq := reports.ReportQuery{From: q.Get("from"), To: q.Get("to"), Timezone: q.Get("timezone"),
		OfferID: q.Get("offerId"), PartnerID: q.Get("partnerId"), GroupBy: []string{}}
	if g := q.Get("groupBy"); g != "" {
		rq.GroupBy = strings.Split(g, ",")
	}
	report, err := a.svc.Reports.Report(r.Context(), p.BrandID, rq)
	if err != nil {
		return err
	}
	if format != "csv" {
		writeJSON(w, http.StatusOK, report)
		return nil
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s"`, ReportFilename(report)))
	w.WriteHeader(http.StatusOK)
	_ = report.WriteCSV(w) // the client went away; nothing left to tell it
	return nil
}

// ReportFilename names a report's CSV download.
func ReportFilename(r reports.Report) string {
	return "tally-report-" + r.From + "-to-" + r.To + ".csv"
}

// answerFormat is the format an answer that can be CSV is asked in:
// ?format=json|csv, else CSV when the Accept header prefers it.
func answerFormat(r *http.Request, q url.Values) (string, error) {
	format := q.Get("format")
	switch {
	case format == "" && prefersCSV(r.Header.Get("Accept")):
		return "csv", nil
	case format != "" && format != "json" && format != "csv":
		return "", tally.Errorf(tally.ECodeValidation, "format must be json or csv.")
	}
	return format, nil
}

// prefersCSV reports whether an Accept header asks for CSV before JSON: the
// first of text/csv and application/json it lists (with a non-zero q) wins.
func prefersCSV(accept string) bool {
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" || params["q"] == "0.0" {
			continue
		}
		switch mt {
		case "text/csv":
			return true
		case "application/json":
			return false
		}
	}
	return false
}

func (a *API) apply(w http.ResponseWriter, r *http.Request, _ identity.Principal) error {
	var in partners.ApplicationInput
	if err := decodeBody(w, r, &in); err != nil {
		return err
	}
	partner, err := a.svc.Partners.Apply(r.Context(), r.PathValue("brandId"), in)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, partner)
	return nil
}
