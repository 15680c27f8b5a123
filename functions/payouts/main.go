// Command payouts is the Lambda function behind partner money: balances
// (GET /api/v1/partners/{id}/balance) and payouts (/api/v1/payouts).
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupPayouts}) }
