// Command click is the Lambda function behind the tracking link,
// GET /c/{offerId}: it records a click and redirects the visitor. It is the
// busiest route, so it has a function of its own.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupClick}) }
