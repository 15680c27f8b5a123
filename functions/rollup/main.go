// Command rollup is the Lambda function behind the table's stream (new conversions and clicks): it adds them to the report rollups, a batch at a time.
package main

import "github.com/tally-hq/tally/internal/lambdafn/rollup"

func main() { rollup.Serve() }
