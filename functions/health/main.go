// Command health is the Lambda function behind GET /healthz (the function
// runs) and GET /readyz (the table answers a read).
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupHealth}) }
