// Command conversions is the Lambda function behind the conversion routes:
// POST and GET /api/v1/conversions, GET /api/v1/conversions/{id}, and
// POST /api/v1/conversions/{id}/approve and /reject.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
)

func main() { lambdafn.ServeAPI(httpapi.GroupConversions) }
