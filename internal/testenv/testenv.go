// Package testenv runs a test against every store backend: the embedded
// bbolt store in a temporary folder, and a fresh table in Amazon's DynamoDB
// Local (see dynamotest). Packages that use it call dynamotest.Main from
// their TestMain.
package testenv

import (
	"bytes"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/bolt"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// Backend opens a fresh, empty store for a test.
type Backend struct {
	Name string
	Open func(t *testing.T) store.Store
}

// Backends are the two store implementations.
var Backends = []Backend{
	{Name: "bolt", Open: Bolt},
	{Name: "dynamodb", Open: DynamoDB},
}

// Bolt opens an embedded store in a temporary folder, closed after the test.
func Bolt(t *testing.T) store.Store {
	t.Helper()
	st, err := bolt.Open(t.TempDir() + "/tally.db")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// DynamoDB opens a store over a fresh table in DynamoDB Local.
func DynamoDB(t *testing.T) store.Store {
	t.Helper()
	client, table := dynamotest.NewTable(t)
	return dynamo.New(client, table)
}

// ForEachStore runs fn as a subtest per backend.
func ForEachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	for _, b := range Backends {
		t.Run(b.Name, func(t *testing.T) { fn(t, b.Open(t)) })
	}
}

// Clock is a settable clock for tracking.WithClock, safe for concurrent use.
type Clock struct{ unixNano atomic.Int64 }

// NewClock returns a clock stopped at t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.Set(t)
	return c
}

// MidMinute returns a clock stopped 20 s into the current minute: rate limits
// and velocity counters count per UTC minute, so a test that fills a window
// must not see it roll over however slow the machine is.
func MidMinute() *Clock { return NewClock(time.Now().Truncate(time.Minute).Add(20 * time.Second)) }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { return time.Unix(0, c.unixNano.Load()).UTC() }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.unixNano.Store(t.UnixNano()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.unixNano.Add(int64(d)) }

// SyncBuffer collects output written from other goroutines (a server's log,
// a process's stdout) for a test to read while it is still written.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Take returns everything written since the last Take and forgets it.
func (b *SyncBuffer) Take() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := bytes.Clone(b.buf.Bytes())
	b.buf.Reset()
	return out
}
