package deploy_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tally-hq/tally/internal/deploy"
)

func TestReadMainsRefusesWhatItCannotResolve(t *testing.T) {
	for name, body := range map[string]string{
		"unknown group":     `api.Serve([]string{httpapi.GroupNope})`,
		"group by string":   `api.Serve([]string{"offers"})`,
		"groups in a var":   `groups := []string{httpapi.GroupOffers}; api.Serve(groups)`,
		"two calls":         `api.Serve([]string{httpapi.GroupOffers}); approve.Serve()`,
		"no call":           `println(); _ = fanout.ServeFanout; _ = httpapi.GroupOffers`,
		"arguments of kind": `fanout.ServeFanout(httpapi.GroupOffers); _ = api.Serve; _ = approve.Serve`,
		"unknown Serve":     `fanout.ServeEverything(); _ = api.Serve; _ = approve.Serve; _ = httpapi.GroupOffers`,
		"not imported":      ``,
	} {
		root := t.TempDir()
		dir := filepath.Join(root, "functions", "x")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		src := "package main\n\nimport (\n\t\"github.com/tally-hq/tally/internal/httpapi\"\n\t\"github.com/tally-hq/tally/internal/lambdafn/api\"\n\t\"github.com/tally-hq/tally/internal/lambdafn/approve\"\n\t\"github.com/tally-hq/tally/internal/lambdafn/fanout\"\n)\n\nfunc main() { " + body + " }\n"
		if name == "not imported" {
			src = "package main\n\nfunc main() { api.Serve([]string{httpapi.GroupOffers}) }\n"
		}
		if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := deploy.ReadMains(root); err == nil || !strings.Contains(err.Error(), "functions/x") {
			t.Errorf("%s: err %v, want one naming functions/x", name, err)
		}
	}
	mains, err := deploy.ReadMains("../..")
	if err != nil {
		t.Fatal(err)
	}
	fallbacks := 0
	for _, m := range mains {
		if m.IsFallback() {
			fallbacks++
		}
	}
	if fallbacks != 1 {
		t.Errorf("%d fallback functions, want 1", fallbacks)
	}
}
