// Command fraud is the Lambda function behind the click and fraud routes:
// GET /api/v1/clicks and /api/v1/clicks/{id}, GET and PUT
// /api/v1/fraud/settings, GET and POST /api/v1/fraud/blocked-ips and
// DELETE /api/v1/fraud/blocked-ips/{id}.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupFraud}) }
