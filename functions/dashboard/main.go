// Command dashboard is the Lambda function behind the dashboard's pages
// (GET /dashboard, GET and POST /dashboard/{path+}) and the partner
// application page (GET and POST /apply/{brandId}).
package main

import (
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/tzdb"
)

func main() {
	lambdafn.Pages = dashboard.New
	lambdafn.Zones = tzdb.LoadLocation // the reports page; see functions/reports
	lambdafn.ServeAPI(httpapi.GroupDashboard)
}
