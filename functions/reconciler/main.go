// Command reconciler is the scheduled Lambda function (an EventBridge rule,
// every five minutes) that re-drives webhook work the pipeline dropped:
// the conversions of the stream batches the fan-out gave up on (FanoutDLQ),
// events not fanned out and pending deliveries whose next attempt is
// overdue.
package main

import "github.com/tally-hq/tally/internal/lambdafn/fanout"

func main() { fanout.ServeReconciler() }
