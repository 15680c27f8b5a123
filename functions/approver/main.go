// Command approver is the scheduled Lambda function (an EventBridge rule,
// every minute) that approves pending conversions whose offer's hold time
// has elapsed.
package main

import "github.com/tally-hq/tally/internal/lambdafn/approve"

func main() { approve.Serve() }
