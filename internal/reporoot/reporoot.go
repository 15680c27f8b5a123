// Package reporoot finds the repository's root folder, for tests and test
// helpers that run tools or read files kept there (.cache, events/).
package reporoot

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Find walks up from the working directory (go test sets it to the
// package's folder) to the folder holding the root go.mod.
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Missing reports a tool a test needs that was not fetched: it skips the
// test, or fails it when the CI variable is set, since CI must not silently
// skip.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}
