// Command dashboard is the Lambda function behind the dashboard's pages
// (GET /dashboard, GET and POST /dashboard/{path+}), the partner
// application page (GET and POST /apply/{brandId}) and the partner portal
// (GET /portal, GET and POST /portal/{path+}). Its retry and recover
// buttons queue deliveries, as functions/deliveries does for the API.
package main

import (
	"github.com/tally-hq/tally/internal/awskms"
	"github.com/tally-hq/tally/internal/dashboard"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
	"github.com/tally-hq/tally/internal/password"
	"github.com/tally-hq/tally/internal/portal"
	"github.com/tally-hq/tally/internal/tzdb"
)

func main() {
	log := lambdafn.Logger()
	key, err := awskms.FromEnv()
	if err != nil {
		lambdafn.Fatal(log, err)
	}
	api.Serve([]string{httpapi.GroupDashboard},
		api.WithPages(dashboard.New),
		api.WithPortal(portal.New),
		api.WithZones(tzdb.LoadLocation), // the reports page; see functions/reports
		api.WithPasswords(password.Argon2id{}),
		api.WithRequeue(queue.FromEnv(log)),
		api.WithSecrets(key))
}
