// Command lambdacheck (make lambda-check) measures every function's
// bootstrap: its size as `make build` makes it (linux/arm64), the modules
// it links, and its init time (from the process's start to its first
// request for an invocation, against a stand-in of the Lambda Runtime API)
// next to an aws-lambda-go hello world, built for this machine and run in
// the same rounds. It fails when an API function's bootstrap is over
// lambdacheck.MaxAPISize, a function links a module it does not use, or a
// function's median init is more than lambdacheck.InitMargin over the hello
// world's. Timing needs a quiet machine, so it is not part of make test;
// internal/lambdacheck's test checks the sizes and modules.
//
//	go run ./scripts/lambdacheck [-rounds 21]
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/tally-hq/tally/internal/lambdacheck"
	"github.com/tally-hq/tally/internal/reporoot"
)

func main() {
	rounds := flag.Int("rounds", 21, "starts of each binary; the median counts")
	flag.Parse()
	if err := run(*rounds); err != nil {
		fmt.Fprintln(os.Stderr, "lambdacheck:", err)
		os.Exit(1)
	}
}

func run(rounds int) error {
	ctx := context.Background()
	root, err := reporoot.Find()
	if err != nil {
		return err
	}
	fns, err := lambdacheck.Functions(root)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "lambdacheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var pkgs []string
	env := map[string][]string{}
	for _, f := range fns {
		pkgs = append(pkgs, "./functions/"+f.Dir)
		env[f.Dir] = f.Env
	}
	arm, err := lambdacheck.Build(ctx, root, dir+"/arm64", "arm64", pkgs...)
	if err != nil {
		return err
	}
	host, err := lambdacheck.Build(ctx, root, dir+"/host", runtime.GOARCH, append(pkgs, lambdacheck.HelloPackage)...)
	if err != nil {
		return err
	}
	inits, err := lambdacheck.Medians(ctx, host, env, rounds)
	if err != nil {
		return err
	}
	hello := inits["hello"]
	var failures []string
	fmt.Printf("%-14s %9s  %9s  %s\n", "function", "arm64 MiB", "init", fmt.Sprintf("(hello world %.1f ms, median of %d, linux/%s)", ms(hello), rounds, runtime.GOARCH))
	for _, f := range fns {
		fi, err := os.Stat(arm[f.Dir])
		if err != nil {
			return err
		}
		note := ""
		if max := f.MaxSize(); max > 0 && fi.Size() > max {
			failures = append(failures, fmt.Sprintf("functions/%s is %.2f MiB", f.Dir, float64(fi.Size())/(1<<20)))
			note += " SIZE"
		}
		if d := inits[f.Dir]; d > hello+lambdacheck.InitMargin {
			failures = append(failures, fmt.Sprintf("functions/%s starts in %.1f ms, %.1f ms over the hello world", f.Dir, ms(d), ms(d-hello)))
			note += " INIT"
		}
		bad, err := lambdacheck.CheckModules(arm[f.Dir], lambdacheck.Names(f.Env))
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			failures = append(failures, fmt.Sprintf("functions/%s links %s", f.Dir, strings.Join(bad, ", ")))
			note += " LINKS"
		}
		fmt.Printf("%-14s %9.2f  %6.1f ms  %+.1f ms%s\n", f.Dir, float64(fi.Size())/(1<<20), ms(inits[f.Dir]), ms(inits[f.Dir]-hello), note)
	}
	if len(failures) > 0 {
		slices.Sort(failures)
		return fmt.Errorf("over budget (API bootstrap ≤ %.1f MiB, pages ≤ %.1f MiB, init ≤ hello world + %v):\n  %s",
			float64(lambdacheck.MaxAPISize)/(1<<20), float64(lambdacheck.MaxPagesSize)/(1<<20), lambdacheck.InitMargin, strings.Join(failures, "\n  "))
	}
	return nil
}

func ms(d interface{ Seconds() float64 }) float64 { return d.Seconds() * 1000 }
