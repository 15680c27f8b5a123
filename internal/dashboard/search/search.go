// Package search serves the dashboard's search: one box, in the header of
// every page, that finds a conversion by its id or its order id (the
// externalTxnId an advertiser sent), a click, offer or partner by its id,
// and partners by a part of their name or e-mail address. One match opens
// its page; several are listed. Every lookup is the signed-in brand's: a
// brand never finds another's records. The dashboard mounts it (Routes)
// behind its sign-in.
package search

import (
	"context"
	"embed"
	"net/http"
	"strings"
	"sync"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// Templates are the page's templates, for the dashboard's site.
//
//go:embed templates/*.html
var Templates embed.FS

// Path is the search page's, which the header's box sends to.
const Path = "/dashboard/search"

// The bounds of a search, so that one costs a few dozen reads at most:
// order ids are looked up in the newest offers (one read each, in
// parallel), names among the newest partners.
const (
	maxOffers   = records.MaxLimit
	maxPartners = 5 * records.MaxLimit
	maxQuery    = 255 // the longest order id there is
	parallel    = 8   // order id lookups at a time
)

// Pages are the search page.
type Pages struct {
	svc  httpapi.Services
	site *web.Site
}

// New returns the page over svc, rendered by site.
func New(svc httpapi.Services, site *web.Site) *Pages { return &Pages{svc: svc, site: site} }

// Routes are the page's routes, behind the dashboard's sign-in.
func (p *Pages) Routes() map[string]web.PageFunc {
	return map[string]web.PageFunc{"GET " + Path: p.search}
}

// results are what a search found, by kind.
type results struct {
	Query        string
	Conversions  []tally.Conversion
	Clicks       []tally.Click
	Offers       []tally.Offer
	Partners     []tally.Partner
	PartnersMore bool // more partners match than the page lists
	Searched     int  // the partners whose names were searched
	Bounded      bool // the brand has more partners than were searched
	// OffersRead is how many offers order ids were looked up in when the
	// brand has more; 0 when it has no more.
	OffersRead int
	Error      string
}

// maxListed bounds the partners a search lists.
const maxListed = 50

func (res results) count() int {
	return len(res.Conversions) + len(res.Clicks) + len(res.Offers) + len(res.Partners)
}

// only is the page of the one thing found, or "".
func (res results) only() string {
	if res.count() != 1 {
		return ""
	}
	switch {
	case len(res.Conversions) == 1:
		return "/dashboard/conversions/" + res.Conversions[0].ID
	case len(res.Clicks) == 1:
		return "/dashboard/clicks/" + res.Clicks[0].ID
	case len(res.Offers) == 1:
		return "/dashboard/offers/" + res.Offers[0].ID
	}
	return "/dashboard/partners/" + res.Partners[0].ID
}

func (p *Pages) search(w http.ResponseWriter, r *web.Request) error {
	res := results{Query: strings.TrimSpace(r.URL.Query().Get("q"))}
	status := http.StatusOK
	switch {
	case res.Query == "":
	case len(res.Query) > maxQuery:
		res.Error, status = "Search for at most 255 characters: an order id, a conversion or click id, or a partner's name.", http.StatusUnprocessableEntity
	default:
		if err := p.find(r, &res); err != nil {
			return err
		}
		if to := res.only(); to != "" {
			http.Redirect(w, r.Request, to, http.StatusSeeOther)
			return nil
		}
	}
	p.site.RenderStatus(w, status, "search", r.View("Search", "", res))
	return nil
}

// find fills in what matches res.Query.
func (p *Pages) find(r *web.Request, res *results) error {
	ctx, brand, q := r.Context(), r.Subject, res.Query
	var err error
	switch {
	case strings.HasPrefix(q, "cnv_"):
		var c tally.Conversion
		if c, err = p.svc.Conversions.Conversion(ctx, brand, q); err == nil {
			res.Conversions = append(res.Conversions, c)
		}
	case strings.HasPrefix(q, "clk_"):
		var c tally.Click
		if c, err = p.svc.Clicks.Click(ctx, brand, q); err == nil {
			res.Clicks = append(res.Clicks, c)
		}
	case strings.HasPrefix(q, "off_"):
		var o tally.Offer
		if o, err = p.svc.Offers.Offer(ctx, brand, q); err == nil {
			res.Offers = append(res.Offers, o)
		}
	case strings.HasPrefix(q, "prt_"):
		var pr tally.Partner
		if pr, err = p.svc.Partners.Partner(ctx, brand, q); err == nil {
			res.Partners = append(res.Partners, pr)
		}
	}
	switch {
	case res.count() > 0:
		return nil
	case err != nil && !web.IsCode(err, tally.ECodeNotFound): // another brand's record, or none, is not found
		return err
	}
	if res.Conversions, res.OffersRead, err = p.byOrderID(ctx, brand, q); err != nil {
		return err
	}
	return p.byName(ctx, brand, res)
}

// byOrderID finds the conversions recorded with externalTxnId q, in the
// brand's newest offers; read is how many offers that was when the brand
// has older ones (0 when it has not).
func (p *Pages) byOrderID(ctx context.Context, brand, q string) (found []tally.Conversion, read int, err error) {
	offers, next, err := p.svc.Offers.Offers(ctx, brand, records.ListParams{Limit: maxOffers})
	if err != nil {
		return nil, 0, err
	}
	var (
		mu    sync.Mutex
		out   []tally.Conversion
		first error
		wg    sync.WaitGroup
		slots = make(chan struct{}, parallel)
	)
	for _, o := range offers {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			c, err := p.svc.Conversions.ConversionByTxn(ctx, brand, o.ID, q)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out = append(out, c)
			case !web.IsCode(err, tally.ECodeNotFound) && first == nil:
				first = err
			}
		})
	}
	wg.Wait()
	if next != "" {
		read = len(offers)
	}
	return out, read, first
}

// byName finds the partners among the brand's newest whose name or
// e-mail address holds q, in any case.
func (p *Pages) byName(ctx context.Context, brand string, res *results) error {
	q := strings.ToLower(res.Query)
	cursor := ""
	for res.Searched < maxPartners {
		page, next, err := p.svc.Partners.Partners(ctx, brand, "", records.ListParams{Limit: records.MaxLimit, Cursor: cursor})
		if err != nil {
			return err
		}
		res.Searched += len(page)
		for _, pr := range page {
			if strings.Contains(strings.ToLower(pr.Name), q) || strings.Contains(strings.ToLower(pr.Email), q) {
				if len(res.Partners) == maxListed {
					res.PartnersMore = true
					return nil
				}
				res.Partners = append(res.Partners, pr)
			}
		}
		if cursor = next; cursor == "" {
			return nil
		}
	}
	res.Bounded = true
	return nil
}
