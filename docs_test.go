package tally_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// markdownFiles lists the repository's Markdown files (outside fetched or
// built folders).
func markdownFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "bin" || d.Name() == "cdk.out") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

var (
	mdLink   = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan = regexp.MustCompile("`(\\.\\./[^`\\s]+)`")
)

// TestDocsStayInTheRepository: the project documents its own contract, so
// every link, and every relative path its docs quote, resolves to a file in
// the repository; none points outside it (to a web page, or to a folder
// beside the repository that a reader does not have).
func TestDocsStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range markdownFiles(t) {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		// Links must lead to a file; quoted paths (build outputs among
		// them) must at least stay inside.
		linked := map[string]bool{}
		var targets []string
		for _, m := range mdLink.FindAllStringSubmatch(string(raw), -1) {
			targets, linked[m[1]] = append(targets, m[1]), true
		}
		for _, m := range codeSpan.FindAllStringSubmatch(string(raw), -1) {
			targets = append(targets, m[1])
		}
		for _, target := range targets {
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				t.Errorf("%s links outside the repository: %s", file, target)
				continue
			}
			path, _, _ := strings.Cut(target, "#")
			if path == "" {
				continue
			}
			abs := filepath.Join(root, filepath.Dir(file), path)
			if rel, err := filepath.Rel(root, abs); err != nil || strings.HasPrefix(rel, "..") {
				t.Errorf("%s points outside the repository: %s", file, target)
			} else if _, err := os.Stat(abs); err != nil && linked[target] {
				t.Errorf("%s links to %s, which does not exist", file, target)
			}
		}
	}
}

// TestReadmeCommandsWorkOnAnyDay: the README's commands are to be copied
// and run, on any day; a fixed date in them goes stale (a report of some
// month in the future shows nothing).
func TestReadmeCommandsWorkOnAnyDay(t *testing.T) {
	raw, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	date := regexp.MustCompile(`\b(19|20)[0-9]{2}-[01][0-9](-[0-3][0-9])?\b`)
	inShell := false
	for i, line := range strings.Split(string(raw), "\n") {
		switch {
		case strings.HasPrefix(line, "```sh"):
			inShell = true
		case strings.HasPrefix(line, "```"):
			inShell = false
		case inShell && date.MatchString(line):
			t.Errorf("README.md:%d: a fixed date in a command: %s", i+1, strings.TrimSpace(line))
		}
	}
}
