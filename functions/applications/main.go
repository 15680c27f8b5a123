// Command applications is the Lambda function behind the public partner
// application form, POST /api/public/brands/{brandId}/applications (no API
// key; rate-limited per client IP).
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupApplications}) }
