// Command attempt is the Lambda function behind the retry state machine's task: attempt n of a delivery.
package main

import "github.com/tally-hq/tally/internal/lambdafn/attempt"

func main() { attempt.Serve() }
