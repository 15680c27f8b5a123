// Command keys is the Lambda function behind the API key routes:
// GET and POST /api/v1/keys, DELETE /api/v1/keys/{id}.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupKeys}) }
