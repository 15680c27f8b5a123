// Command fallback is the Lambda function behind the HTTP API's $default
// route: whatever no other function's route matches. It answers in the
// API's error shape, 405 with Allow for a known path and another method,
// 404 for any other path, instead of API Gateway's own {"message":"Not
// Found"}. It serves no route; like the routes, it checks the key where
// keys are needed and counts the request against a rate limit.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupFallback}) }
