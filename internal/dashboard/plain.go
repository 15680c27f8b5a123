package dashboard

import (
	"strings"

	"github.com/tally-hq/tally"
)

// filterMessage says what is wrong with a filter form (reports, clicks,
// conversions) in the words of its labels, not the API's parameter names
// ("from must not be after to" reads "The start date is after the end
// date."). field is the parameter the error is about, as fieldOf found it.
func filterMessage(err error, field string) string {
	msg := tally.ErrorMessage(err)
	switch {
	case strings.HasPrefix(msg, "from must not be after to"):
		return "The start date is after the end date."
	case strings.HasPrefix(msg, "A report covers at most"):
		n, _, _ := strings.Cut(strings.TrimPrefix(msg, "A report covers at most "), " ")
		return "A report covers at most " + n + " days: choose a shorter range."
	case field == "from":
		return "Enter the start date as a date, such as 2026-11-01."
	case field == "to":
		return "Enter the end date as a date, such as 2026-11-30."
	case field == "minScore":
		return "Min score must be a whole number from 0 to 100."
	case field == "timezone":
		return "Choose a time zone from the list."
	}
	return msg
}
