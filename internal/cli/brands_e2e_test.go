package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tallyIn runs the binary with dir as its working directory.
func tallyIn(t *testing.T, dir string, environ []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, tallyBin, args...)
	cmd.Dir, cmd.Env = dir, environ
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tally %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return result{stdout: stdout.String(), stderr: stderr.String()}
}

// brandNames is the names of a brands list, in its order.
func brandNames(t *testing.T, out string) []string {
	t.Helper()
	var list struct{ Data []struct{ Name string } }
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("brands list printed %q: %v", out, err)
	}
	var names []string
	for _, b := range list.Data {
		names = append(names, b.Name)
	}
	return names
}

// An admin command run without --data where there is no store yet (say,
// elsewhere than the server) says which folder it used and that it made
// a new store there, rather than quietly starting another brand list.
func TestAdminCommandSaysWhenItMakesANewDefaultStore(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := tallyIn(t, dir, env(), "brands", "create", "--name", "Acme")
	if want := filepath.Join(dir, ".tally"); !strings.Contains(first.stderr, want) || !strings.Contains(first.stderr, "made a new store") || !strings.Contains(first.stderr, "--data") {
		t.Errorf("the first command in %s printed %q on stderr; want that it made a new store in %s and how to reach another", dir, first.stderr, want)
	}
	if again := tallyIn(t, dir, env(), "brands", "create", "--name", "Beta"); again.stderr != "" {
		t.Errorf("a command with the store in place printed %q on stderr", again.stderr)
	}
	if got := brandNames(t, tallyIn(t, dir, env(), "brands", "list").stdout); strings.Join(got, ",") != "Beta,Acme" {
		t.Errorf("brands list: %v, want Beta, Acme (newest first)", got)
	}
}

// tally brands list lists the brands, newest first, from the store or
// through the server that holds it, and on DynamoDB.
func TestBrandsList(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, environ []string, data ...string) {
		for _, name := range []string{"One", "Two", "Three"} {
			tallyOK(t, environ, append([]string{"brands", "create", "--name", name}, data...)...)
		}
		list := tallyOK(t, environ, append([]string{"brands", "list"}, data...)...)
		raw, _ := json.Marshal(list)
		if got := brandNames(t, string(raw)); strings.Join(got, ",") != "Three,Two,One" {
			t.Errorf("brands list: %v, want Three, Two, One", got)
		}
	}
	t.Run("bolt", func(t *testing.T) {
		t.Parallel()
		data := t.TempDir()
		check(t, env(), "--data", data)
		serve(t, env(), "--data", data) // now the server holds the store
		list := tallyOK(t, env(), "brands", "list", "--data", data)
		raw, _ := json.Marshal(list)
		if got := brandNames(t, string(raw)); len(got) != 3 {
			t.Errorf("brands list through the server: %v", got)
		}
	})
	t.Run("dynamodb", func(t *testing.T) {
		t.Parallel()
		check(t, dynamoEnviron(t, env()))
	})
}
