// Package tzdb loads IANA time zones for a program that may run where the
// system has no zone database (Lambda's provided.al2023): from the system's
// database when there is one, else from a copy of Go's own
// ($GOROOT/lib/time/zoneinfo.zip) embedded here compressed, 95 KB where
// importing time/tzdata adds 450 KB to the binary.
package tzdb

//go:generate sh -c "gzip -9 -n -c \"$(go env GOROOT)/lib/time/zoneinfo.zip\" > zoneinfo.zip.gz"

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	_ "embed"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

//go:embed zoneinfo.zip.gz
var compressed []byte

// LoadLocation is time.LoadLocation, falling back to the embedded database
// when the system's has no zone of that name.
func LoadLocation(name string) (*time.Location, error) {
	loc, err := time.LoadLocation(name)
	if err == nil {
		return loc, nil
	}
	if loc, embErr := embedded(name); embErr == nil {
		return loc, nil
	}
	return nil, err
}

// db is the embedded database, read on first use.
var db = sync.OnceValues(func() (*zip.Reader, error) {
	gz, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		return nil, err
	}
	raw, err := io.ReadAll(gz)
	if err != nil {
		return nil, err
	}
	return zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
})

// embedded loads name from the embedded database.
func embedded(name string) (*time.Location, error) {
	r, err := db()
	if err != nil {
		return nil, fmt.Errorf("tzdb: the embedded database: %w", err)
	}
	f, err := r.Open(name)
	if err != nil {
		return nil, fmt.Errorf("tzdb: no zone %q", name)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, err
	}
	return time.LoadLocationFromTZData(name, data)
}

// regions are the areas of the zones Names lists: the database's other
// names (US/Pacific, Etc/GMT+5, …) are old aliases or fixed offsets.
var regions = []string{"Africa/", "America/", "Antarctica/", "Asia/", "Atlantic/", "Australia/", "Europe/", "Indian/", "Pacific/"}

// Names are the zones to choose from, sorted: UTC and the embedded
// database's zones of a region ("Europe/Paris", "America/Argentina/Salta").
var Names = sync.OnceValue(func() []string {
	names := []string{"UTC"}
	r, err := db()
	if err != nil {
		return names
	}
	for _, f := range r.File {
		for _, region := range regions {
			if strings.HasPrefix(f.Name, region) && !strings.HasSuffix(f.Name, "/") {
				names = append(names, f.Name)
				break
			}
		}
	}
	slices.Sort(names[1:])
	return names
})
