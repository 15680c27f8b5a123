// Command deliver is the Lambda function behind the delivery queue: attempt 1 of each delivery, then the retry state machine.
package main

import "github.com/tally-hq/tally/internal/lambdafn/deliver"

func main() { deliver.ServeDeliver() }
