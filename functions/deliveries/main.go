// Command deliveries is the Lambda function behind the delivery log:
// GET /api/v1/deliveries, GET /api/v1/deliveries/{id} and its retry.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
)

func main() { lambdafn.ServeAPI(httpapi.GroupDeliveries) }
