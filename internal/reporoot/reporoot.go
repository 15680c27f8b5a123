// Package reporoot finds the repository's root folder, for tests and test
// helpers that run tools or read files kept there (.cache, events/).
package reporoot

import (
	"errors"
	"os"
	"path/filepath"
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
