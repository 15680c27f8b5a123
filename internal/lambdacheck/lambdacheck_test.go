package lambdacheck_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/lambdacheck"
	"github.com/tally-hq/tally/internal/reporoot"
)

// TestBootstraps builds every function as `make build` does (linux/arm64)
// and checks what Lambda deploys: an API function's bootstrap is at most
// lambdacheck.MaxAPISize (one that renders pages, MaxPagesSize), and no
// function links a module it does not use.
// The checks derive from the function list (functions/*/main.go and
// template.yaml), so a new function is held to them as it is.
func TestBootstraps(t *testing.T) {
	if testing.Short() {
		t.Skip("builds every function")
	}
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	fns, err := lambdacheck.Functions(root)
	if err != nil {
		t.Fatal(err)
	}
	var pkgs []string
	for _, f := range fns {
		pkgs = append(pkgs, "./functions/"+f.Dir)
	}
	bins, err := lambdacheck.Build(t.Context(), root, t.TempDir(), "arm64", pkgs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fns {
		fi, err := os.Stat(bins[f.Dir])
		if err != nil {
			t.Fatal(err)
		}
		size := float64(fi.Size()) / (1 << 20)
		line := fmt.Sprintf("functions/%-12s %5.2f MiB", f.Dir, size)
		if max := f.MaxSize(); max > 0 && fi.Size() > max {
			t.Errorf("%s: over its %.1f MiB", line, float64(max)/(1<<20))
		}
		bad, err := lambdacheck.CheckModules(bins[f.Dir], lambdacheck.Names(f.Env))
		if err != nil {
			t.Fatal(err)
		}
		if len(bad) > 0 {
			t.Errorf("functions/%s links what it does not use: %s", f.Dir, strings.Join(bad, ", "))
		}
		t.Log(line)
	}
}

// TestCheckModulesSeesAForbiddenModule checks the rules on a binary that
// breaks them: the CLI, which links the embedded store and the SDK's whole
// credential chain.
func TestCheckModulesSeesAForbiddenModule(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	root, err := reporoot.Find()
	if err != nil {
		t.Fatal(err)
	}
	bins, err := lambdacheck.Build(t.Context(), root, t.TempDir(), "arm64", "./cmd/tally")
	if err != nil {
		t.Fatal(err)
	}
	bad, err := lambdacheck.CheckModules(bins["tally"], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go.etcd.io/bbolt", "github.com/aws/aws-sdk-go-v2/config", "github.com/aws/aws-sdk-go-v2/service/sts"} {
		if !strings.Contains(strings.Join(bad, " "), want) {
			t.Errorf("CheckModules on the CLI found %v, not %s", bad, want)
		}
	}
}
