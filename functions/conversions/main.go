// Command conversions is the Lambda function behind the conversion routes:
// POST and GET /api/v1/conversions, GET /api/v1/conversions/{id},
// POST /api/v1/conversions/{id}/approve and /reject, the brand's postback
// token (GET, POST, DELETE /api/v1/postback-token) and the advertisers'
// GET /postback.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupConversions}) }
