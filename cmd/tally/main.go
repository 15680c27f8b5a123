// Command tally runs the Tally service locally and administers brands and
// API keys and dashboard users. Run `tally help` for usage.
package main

import (
	"context"
	"os"

	"github.com/tally-hq/tally/internal/cli"
)

func main() {
	os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
