// Command webhooks is the Lambda function behind the public webhook API:
// /api/public/webhooks (subscriptions: create, list, get, change, delete,
// test, enable) and /api/public/webhook-events.
package main

import (
	"github.com/tally-hq/tally/internal/awskms"
	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/lambdafn"
	"github.com/tally-hq/tally/internal/lambdafn/api"
)

func main() {
	key, err := awskms.FromEnv()
	if err != nil {
		lambdafn.Fatal(lambdafn.Logger(), err)
	}
	api.Serve([]string{httpapi.GroupWebhooks}, api.WithSecrets(key))
}
