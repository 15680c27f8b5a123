package records

import (
	"time"

	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/validate"
)

// TimeSpan turns the from and to parameters of a list into bounds on the
// time-sortable ids (with prefix) that the list's sort keys are.
func TimeSpan(prefix, from, to string) (Span, error) {
	var sp Span
	var start time.Time
	if from != "" {
		t, err := validate.TimeParam("from", from, false)
		if err != nil {
			return sp, err
		}
		sp.From, start = ids.Floor(prefix, t), t
	}
	if to != "" {
		t, err := validate.TimeParam("to", to, true)
		if err != nil {
			return sp, err
		}
		if from != "" && start.After(t) { // a mistake, as on reports, not an empty list
			return sp, validate.InvalidField("from", "from must not be after to.")
		}
		sp.To = ids.Ceil(prefix, t)
	}
	return sp, nil
}
