// Package brandsettings serves the dashboard's Settings → General page:
// the brand's time zone, which the dashboard counts its days in (the
// overview, date ranges, reports) and writes its times in. The dashboard
// mounts it (Routes) behind its sign-in, in its row of Settings tabs.
package brandsettings

import (
	"embed"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/tzdb"
	"github.com/tally-hq/tally/internal/web"
)

// Templates are the page's templates, for the dashboard's site.
//
//go:embed templates/*.html
var Templates embed.FS

// Flashes are the notices after the page's form.
var Flashes = map[string]string{
	"timezone-saved": "The time zone was saved. The dashboard counts days and writes times in it from now on.",
}

// SettingsView is the view of a Settings page, with its tabs: the
// dashboard's.
type SettingsView func(r *web.Request, title, tab string, data any) web.View

// Pages are the General settings page.
type Pages struct {
	svc  httpapi.Services
	site *web.Site
	view SettingsView
}

// New returns the page over svc, rendered by site in view.
func New(svc httpapi.Services, site *web.Site, view SettingsView) *Pages {
	return &Pages{svc: svc, site: site, view: view}
}

// Routes are the page's routes, each behind the dashboard's sign-in.
func (p *Pages) Routes() map[string]web.PageFunc {
	return map[string]web.PageFunc{
		"GET /dashboard/settings/general":  p.general,
		"POST /dashboard/settings/general": p.save,
	}
}

// generalData is the page: the zone and the zones to choose from.
type generalData struct {
	Timezone string
	Now      string // the time in the zone now
	Groups   []zoneGroup
	Error    string
}

// zoneGroup is the zones of a region, for an optgroup; UTC has none.
type zoneGroup struct {
	Region string
	Zones  []zoneChoice
}

type zoneChoice struct{ Name, Label string }

// groups are tzdb's zones by region, each labelled without it:
// "America/Argentina/Salta" is "Argentina / Salta" among America's.
var groups = sync.OnceValue(func() []zoneGroup {
	var out []zoneGroup
	for _, name := range tzdb.Names() {
		region, city, ok := strings.Cut(name, "/")
		if !ok {
			region, city = "", name
		}
		if len(out) == 0 || out[len(out)-1].Region != region {
			out = append(out, zoneGroup{Region: region})
		}
		g := &out[len(out)-1]
		g.Zones = append(g.Zones, zoneChoice{Name: name, Label: strings.ReplaceAll(strings.ReplaceAll(city, "_", " "), "/", " / ")})
	}
	return out
})

func (p *Pages) general(w http.ResponseWriter, r *web.Request) error {
	b, err := p.svc.Identity.Brand(r.Context(), r.Subject)
	if err != nil {
		return err
	}
	p.render(w, r, http.StatusOK, generalData{Timezone: b.Timezone})
	return nil
}

func (p *Pages) render(w http.ResponseWriter, r *web.Request, status int, data generalData) {
	data.Groups = groups()
	if zone, err := tzdb.LoadLocation(data.Timezone); err == nil {
		data.Now = p.svc.Now().In(zone).Format("Monday 2 January, 15:04 MST")
	}
	p.site.RenderStatus(w, status, "general", p.view(r, "General settings", "general", data))
}

func (p *Pages) save(w http.ResponseWriter, r *web.Request) error {
	name := r.PostFormValue("timezone")
	var zone *time.Location
	var err error
	if slices.Contains(tzdb.Names(), name) {
		zone, err = tzdb.LoadLocation(name)
	}
	if zone == nil || err != nil {
		p.render(w, r, http.StatusUnprocessableEntity, generalData{Timezone: r.Zone().String(), Error: "Choose a time zone from the list."})
		return nil
	}
	if _, err := p.svc.Identity.SetBrandTimezone(r.Context(), r.Subject, zone); err != nil {
		return err
	}
	return web.Redirect(w, r, "/dashboard/settings/general", "timezone-saved")
}
