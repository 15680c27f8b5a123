// Command fanout is the Lambda function behind the table's stream (event items): it makes each event's deliveries and queues them.
package main

import "github.com/tally-hq/tally/internal/lambdafn/fanout"

func main() { fanout.ServeFanout() }
