// Command offers is the Lambda function behind the offer routes:
// GET and POST /api/v1/offers, GET and PATCH /api/v1/offers/{id}.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() { api.Serve([]string{httpapi.GroupOffers}) }
