// Command partners is the Lambda function behind the partner routes:
// GET /api/v1/partners, GET /api/v1/partners/{id}, and
// POST /api/v1/partners/{id}/approve, /reject, /ban, /reactivate and
// /invite (to the partner portal), and a partner's postback
// (/api/v1/partners/{id}/postback: PUT, GET, DELETE, test, enable).
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupPartners}) }
