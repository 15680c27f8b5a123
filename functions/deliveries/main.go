// Command deliveries is the Lambda function behind the delivery log:
// GET /api/v1/deliveries, GET /api/v1/deliveries/{id} and its retry, and
// the recover actions of subscriptions and postbacks, which requeue
// deliveries as a retry does.
package main

import (
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/api"
	"github.com/tally-hq/tally/internal/lambdafn/queue"
)

func main() {
	api.Serve([]string{httpapi.GroupDeliveries}, api.WithRequeue(queue.FromEnv(lambdafn.Logger())))
}
