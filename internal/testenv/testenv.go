// Package testenv runs a test against every store backend: the embedded
// bbolt store in a temporary folder, and a fresh table in Amazon's DynamoDB
// Local (see dynamotest). Packages that use it call dynamotest.Main from
// their TestMain.
//
// # Clocks
//
// No test pins a calendar date: a date that is in the future when a test is
// written is in the past some day after, and then the stores' TTL sweeps,
// which run on the real clock (bbolt's every minute, DynamoDB Local's every
// second), delete what the test wrote. A test that needs a clock of its own
// takes its time from here:
//
//   - Start is 10:00 UTC tomorrow: a fixed time of day, 10 to 34 hours
//     ahead of the real clock, so a test may step its clock forward by days
//     and every expiry it writes still lies in the real future;
//   - MidMinute is 20 s into the current minute, for tests that fill a
//     per-minute window (rate limits, click velocity) and must not see it
//     roll over however slow the machine is;
//   - a test that needs a calendar fact (a daylight-saving change, an ISO
//     week) finds the next such day after Start rather than naming one.
//
// TALLY_TEST_CLOCK_SHIFT (a Go duration: 8760h, -8760h) moves Now, and so
// Start and MidMinute, to find tests that would fail on another day:
// `TALLY_TEST_CLOCK_SHIFT=8760h make test`. The stores opened here sweep
// nothing, so that a clock shifted into the past (whose expiries the real
// clock has passed) still keeps what the test wrote; ExpiringBolt and
// dynamotest.NewPrivateTableWithTTL give a store that sweeps, on the real
// clock, to the tests of expiry itself.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"os"
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

// Bolt opens an embedded store in a temporary folder, closed after the
// test. It does not sweep expired items (see Clocks).
func Bolt(t *testing.T) store.Store {
	t.Helper()
	return openBolt(t, bolt.WithoutSweep())
}

// ExpiringBolt is Bolt with the TTL sweep on, every sweep.
func ExpiringBolt(t *testing.T, sweep time.Duration) store.Store {
	t.Helper()
	return openBolt(t, bolt.WithSweep(sweep))
}

func openBolt(t *testing.T, opts ...bolt.Option) store.Store {
	t.Helper()
	st, err := bolt.Open(t.TempDir()+"/tally.db", opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// DynamoDB opens a store over a fresh table in DynamoDB Local, without TTL
// (see Clocks).
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

// ShiftEnv names the variable that moves the tests' clocks (see Clocks).
const ShiftEnv = "TALLY_TEST_CLOCK_SHIFT"

var shift = sync.OnceValue(func() time.Duration {
	v := os.Getenv(ShiftEnv)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		panic(fmt.Sprintf("testenv: %s=%q is not a Go duration such as 8760h: %v", ShiftEnv, v, err))
	}
	return d
})

// Now is the real time, in UTC, moved by TALLY_TEST_CLOCK_SHIFT.
func Now() time.Time { return time.Now().UTC().Add(shift()) }

// Start is where a test's clock starts: 10:00 UTC on the day after Now,
// as it was when the test binary first asked (a run that passes midnight
// keeps one Start).
var Start = sync.OnceValue(func() time.Time {
	y, m, d := Now().Date()
	return time.Date(y, m, d+1, 10, 0, 0, 0, time.UTC)
})

// Clock is a settable clock for service.WithClock, safe for concurrent use.
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
func MidMinute() *Clock { return NewClock(Now().Truncate(time.Minute).Add(20 * time.Second)) }

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

// Writes is a store that counts the writes (Update, Transact) made
// through it, for tests of what a request costs.
type Writes struct {
	store.Store
	n atomic.Int64
}

// CountWrites wraps st.
func CountWrites(st store.Store) *Writes { return &Writes{Store: st} }

// Take returns the writes counted so far and starts again from zero.
func (w *Writes) Take() int64 { return w.n.Swap(0) }

func (w *Writes) Update(ctx context.Context, op store.Op) (store.Item, error) {
	w.n.Add(1)
	return w.Store.Update(ctx, op)
}

func (w *Writes) Transact(ctx context.Context, ops ...store.Op) error {
	w.n.Add(1)
	return w.Store.Transact(ctx, ops...)
}
