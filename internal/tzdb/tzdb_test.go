package tzdb

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// The embedded database gives each zone the same offsets and names as the
// system's, across DST changes and in zones with :30 and :45 offsets.
func TestEmbeddedZonesMatchTheSystems(t *testing.T) {
	moments := []time.Time{
		time.Date(2026, 3, 29, 0, 59, 0, 0, time.UTC), time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC),
		time.Date(2026, 10, 25, 0, 59, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 0, 0, 0, time.UTC),
		time.Date(2026, 11, 1, 6, 0, 0, 0, time.UTC), time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC),
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for _, name := range []string{"Europe/Paris", "America/New_York", "Asia/Kolkata", "Asia/Kathmandu", "Australia/Lord_Howe", "UTC", "Etc/GMT+5"} {
		want, err := time.LoadLocation(name)
		if err != nil {
			t.Skipf("the system has no %s: %v", name, err)
		}
		got, err := embedded(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range moments {
			gn, goff := m.In(got).Zone()
			wn, woff := m.In(want).Zone()
			if gn != wn || goff != woff {
				t.Errorf("%s at %v: embedded %s%+d, system %s%+d", name, m, gn, goff, wn, woff)
			}
		}
	}
	if _, err := embedded("Mars/Olympus_Mons"); err == nil {
		t.Error("an unknown zone loaded")
	}
	if _, err := LoadLocation("../../etc/passwd"); err == nil {
		t.Error("a path loaded as a zone")
	}
}

// The embedded copy is the Go toolchain's: `go generate ./internal/tzdb`
// after a Go update that changes the zone data. Another toolchain than the
// one that made it (go.mod allows several) may carry other data: the test
// then says so and skips, as the copy is still a valid database.
func TestEmbeddedIsTheToolchains(t *testing.T) {
	want, err := os.ReadFile(filepath.Join(runtime.GOROOT(), "lib", "time", "zoneinfo.zip"))
	if err != nil {
		t.Skipf("no toolchain zoneinfo.zip: %v", err)
	}
	gz, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(gz)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Skipf("zoneinfo.zip.gz is not %s's zoneinfo.zip: run `go generate ./internal/tzdb` to embed this toolchain's", runtime.Version())
	}
}

// Names lists the zones people live in, each of which loads, and not the
// database's aliases.
func TestNames(t *testing.T) {
	names := Names()
	for _, want := range []string{"UTC", "Pacific/Auckland", "America/Los_Angeles", "Asia/Kathmandu", "America/Argentina/Salta"} {
		if !slices.Contains(names, want) {
			t.Errorf("no %s among %d names", want, len(names))
		}
	}
	for _, name := range names {
		if strings.HasPrefix(name, "US/") || strings.HasPrefix(name, "Etc/") {
			t.Errorf("alias %s listed", name)
		}
		if _, err := LoadLocation(name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
