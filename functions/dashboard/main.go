// Command dashboard is the Lambda function behind the dashboard's pages
// (GET /dashboard, GET and POST /dashboard/{path+}) and the partner
// application page (GET and POST /apply/{brandId}). Its retry and recover
// buttons queue deliveries, as functions/deliveries does for the API.
package main

import (
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/tzdb"
)

func main() {
	lambdafn.Pages = dashboard.New
	lambdafn.Zones = tzdb.LoadLocation // the reports page; see functions/reports
	queue.ServeAPI(httpapi.GroupDashboard)
}
