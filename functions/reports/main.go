// Command reports is the Lambda function behind GET /api/v1/reports.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/tzdb"
)

func main() {
	// Reports bucket days in any IANA time zone; provided.al2023 ships no
	// zone database, so the function carries Go's, compressed.
	api.Serve([]string{httpapi.GroupReports}, api.WithZones(tzdb.LoadLocation))
}
