// Command gen writes the retry workflow's definition to the file named by
// its argument.
package main

import (
	"log"
	"os"

	"github.com/tally-hq/tally/internal/statemachine"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: gen FILE")
	}
	def, err := statemachine.Definition()
	if err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(os.Args[1], def, 0o644); err != nil {
		log.Fatal(err)
	}
}
