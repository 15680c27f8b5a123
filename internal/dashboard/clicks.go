package dashboard

import (
	"net/http"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/clicks"
	"github.com/tally-hq/tally/internal/fraud"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/web"
)

// clickRow is a click with its offer's and partner's names, and whether it
// scores above the brand's threshold now.
type clickRow struct {
	tally.Click
	OfferName, PartnerName string
	HighRisk               bool
}

type clicksData struct {
	Rows       []clickRow
	Filter     clicks.ClickFilter
	Offers     web.Picker
	Partners   web.Picker
	Threshold  int
	Page       web.Page
	Error      string
	ErrorField string
	Presets    []web.Preset
}

// clickNamer makes clicks into rows: their offer's and partner's names, and
// whether they score above the brand's threshold as it is now.
type clickNamer struct {
	dir       directory
	threshold int
}

func (d *Dashboard) clickNamer(r *request) (clickNamer, error) {
	settings, err := d.svc.Clicks.FraudSettings(r.Context(), r.Subject)
	if err != nil {
		return clickNamer{}, err
	}
	dir, err := d.directory(r)
	return clickNamer{dir: dir, threshold: settings.Threshold}, err
}

func (n clickNamer) row(c tally.Click) clickRow {
	return clickRow{Click: c, OfferName: n.dir.names[c.OfferID], PartnerName: n.dir.names[c.PartnerID], HighRisk: c.FraudScore > n.threshold}
}

func (d *Dashboard) clicks(w http.ResponseWriter, r *request) error {
	q := r.URL.Query()
	f := clicks.ClickFilter{OfferID: q.Get("offerId"), PartnerID: q.Get("partnerId"), MinScore: q.Get("minScore"), From: q.Get("from"), To: q.Get("to")}
	n, err := d.clickNamer(r)
	if err != nil {
		return err
	}
	data := clicksData{Filter: f, Offers: n.dir.offerPicker(f.OfferID), Partners: n.dir.partnerPicker(f.PartnerID), Threshold: n.threshold,
		Presets: web.Presets(r.URL.Query(), "/dashboard/clicks", d.svc.Now().In(r.Zone()))}
	within := f // the dates are the brand's days
	within.From, within.To = web.DayBounds(f.From, f.To, r.Zone())
	clicks, next, err := d.svc.Clicks.Clicks(r.Context(), r.Subject, within, records.ListParams{Cursor: q.Get("cursor")})
	if err != nil {
		if !web.IsCode(err, tally.ECodeValidation) {
			return err
		}
		data.ErrorField = web.FieldOf(err, "offerId", "partnerId", "minScore", "from", "to")
		data.Error = filterMessage(err, data.ErrorField)
		d.site.RenderStatus(w, http.StatusUnprocessableEntity, "clicks", r.View("Clicks", "clicks", data))
		return nil
	}
	for _, c := range clicks {
		data.Rows = append(data.Rows, n.row(c))
	}
	data.Page = web.PageOf(r, next)
	d.site.Render(w, "clicks", r.View("Clicks", "clicks", data))
	return nil
}

// signal is a fraud signal as the click page explains it.
type signal struct {
	Name, Meaning string
	Weight        int
}

// signalMeanings say what raised each signal (DESIGN "Clicks and fraud").
var signalMeanings = map[string]string{
	tally.SignalDatacenterIP:     "The address belongs to a cloud or hosting provider, where people rarely browse from.",
	tally.SignalBlockedIP:        "The address is in one of your blocked ranges.",
	tally.SignalBotUserAgent:     "The browser's User-Agent is a known bot or crawler.",
	tally.SignalMissingUserAgent: "The request said nothing about its browser (no User-Agent).",
	tally.SignalIPVelocity:       "More than 10 clicks came from this address on this offer within a minute.",
}

type clickData struct {
	clickRow
	Signals   []signal
	Threshold int
}

func (d *Dashboard) click(w http.ResponseWriter, r *request) error {
	c, err := d.svc.Clicks.Click(r.Context(), r.Subject, r.PathValue("id"))
	if err != nil {
		return err
	}
	n, err := d.clickNamer(r)
	if err != nil {
		return err
	}
	data := clickData{clickRow: n.row(c), Threshold: n.threshold}
	for _, s := range c.FraudSignals {
		data.Signals = append(data.Signals, signal{Name: s, Meaning: signalMeanings[s], Weight: fraud.Weights[s]})
	}
	d.site.Render(w, "click", r.View("Click", "clicks", data))
	return nil
}
