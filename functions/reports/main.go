// Command reports is the Lambda function behind GET /api/v1/reports.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
)

func main() { lambdafn.ServeAPI(httpapi.GroupReports) }
