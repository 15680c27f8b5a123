package fraud

import (
	"bytes"
	"io"
	"os"
	"testing"
)

// The embedded gzips are the data files of data/ (go generate writes both;
// an edit by hand to a .txt must be followed by its .gz).
func TestEmbeddedDataIsTheDataFiles(t *testing.T) {
	for name, gz := range map[string][]byte{
		"data/datacenter-ranges.txt": datacenterRanges,
		"data/bot-user-agents.txt":   botUserAgents,
	} {
		want, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(gunzip(gz))
		if err != nil {
			t.Fatalf("%s.gz: %v", name, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s.gz is not %s: run `go generate ./internal/fraud` or gzip -9 -n -k -f %[2]s", name, name)
		}
	}
}
