// Command partners is the Lambda function behind the partner routes:
// GET /api/v1/partners, GET /api/v1/partners/{id}, and
// POST /api/v1/partners/{id}/approve, /reject and /ban.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
)

func main() { lambdafn.ServeAPI(httpapi.GroupPartners) }
