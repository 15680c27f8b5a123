package ratelimit_test

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/ratelimit"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/testenv"
)

// eachStore runs fn on both stores.
func eachStore(t *testing.T, fn func(t *testing.T, st store.Store)) {
	testenv.ForEachStore(t, fn)
}

// eachMeteredStore runs fn on both stores, each counting its writes: on
// DynamoDB Local the write request units billed (a failed conditional
// write is billed like one that applies), on bolt the writes.
func eachMeteredStore(t *testing.T, fn func(t *testing.T, st store.Store, writes func() float64)) {
	t.Run("bolt", func(t *testing.T) {
		st := testenv.CountWrites(testenv.Bolt(t))
		fn(t, st, func() float64 { return float64(st.Take()) })
	})
	t.Run("dynamodb", func(t *testing.T) {
		client, table := dynamotest.NewTable(t)
		meter := dynamotest.NewMeter(client, table)
		fn(t, dynamo.New(meter, table), func() float64 { return meter.Take().WRU })
	})
}

// instances are Shared limits over one store, as on as many Lambda
// instances, on one clock.
func instances(st store.Store, clock func() time.Time, n int) []*ratelimit.Shared {
	out := make([]*ratelimit.Shared, n)
	for i := range out {
		out[i] = ratelimit.NewShared(records.New(st, clock, records.ShardZeroIDs{}))
	}
	return out
}

// race makes offered requests of bucket at once, one at a time on each
// instance as on a Lambda instance, each taking the next request as it is
// free (an even load), and returns how many were admitted.
func race(t *testing.T, limits []*ratelimit.Shared, bucket string, limit int, per time.Duration, offered int) int {
	t.Helper()
	var next atomic.Int64
	return raceEach(t, limits, bucket, limit, per, func(int) bool { return next.Add(1) <= int64(offered) })
}

// raceUneven is race with instance i making offered[i] requests, one after
// another: an uneven load, whose instances stop at different times.
func raceUneven(t *testing.T, limits []*ratelimit.Shared, bucket string, limit int, per time.Duration, offered []int) int {
	t.Helper()
	made := make([]int, len(limits))
	return raceEach(t, limits, bucket, limit, per, func(i int) bool { made[i]++; return made[i] <= offered[i] })
}

// raceEach runs the instances at once, instance i making requests one
// after another while more(i), and returns how many were admitted.
func raceEach(t *testing.T, limits []*ratelimit.Shared, bucket string, limit int, per time.Duration, more func(i int) bool) int {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for i, lim := range limits {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for more(i) {
				d, err := lim.AllowPer(context.Background(), bucket, limit, per)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return int(admitted.Load())
}

// least is the fewest requests the package doc says instances admit in a
// window of a bucket of limit offered offered: min(limit − instances ×
// (MostLeased−1), offered − inFlight × ⌊(shards−1)/MaxTries⌋).
func least(instances, inFlight, limit, shards, offered int) int {
	return min(limit-instances*(ratelimit.MostLeased(limit)-1), offered-inFlight*((shards-1)/ratelimit.MaxTries))
}

// One key's counter is spread over shards so that it can be allowed more
// than one item takes; however many instances race, they admit no more
// than the limit in a window, and no fewer than the package doc states:
// exactly the limit at the default limit (no leases, one shard), and for
// higher limits at most the places the instances' leases can hold unused,
// or ⌊(shards−1)/3⌋ per request in flight, short of it.
func TestSharedAdmitsTheLimitAndNoMore(t *testing.T) {
	const inFlight = 16 // instances, one request at a time each
	for _, tc := range []struct {
		name   string
		limit  int
		per    time.Duration
		shards int
	}{
		{"one shard", 100, time.Minute, 1}, // the default RateLimit: exact
		// Windows of 100 ms: the shards of a high limit with few requests.
		{"four shards", 160, 100 * time.Millisecond, 4},  // 1,600 a second: 40 a shard
		{"eight shards", 400, 100 * time.Millisecond, 8}, // 4,000 a second: 50 a shard
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, st store.Store) {
				clock := testenv.MidMinute() // fixed: the race cannot straddle two windows
				limits := instances(st, clock.Now, inFlight)
				for _, offered := range []int{tc.limit, 2 * tc.limit} {
					low := least(inFlight, inFlight, tc.limit, tc.shards, offered)
					got := race(t, limits, "key:"+strconv.Itoa(offered), tc.limit, tc.per, offered)
					if got > tc.limit || got < low {
						t.Errorf("%d offered at a limit of %d: %d admitted, want %d to %d", offered, tc.limit, got, low, tc.limit)
					} else {
						t.Logf("%d offered at a limit of %d: %d admitted (bound %d)", offered, tc.limit, got, low)
					}
				}
			})
		})
	}
	if got := least(inFlight, inFlight, 100, 1, 100); got != 100 {
		t.Errorf("at the default limit the bound is %d, want exactly the limit", got)
	}
}

// Instances that each serve a different share of a key's requests and stop
// at different times (the ones with few requests leave their leases
// unused) admit no more than the limit and no fewer than the bound: at the
// default limit exactly the limit.
func TestSharedUnderUnevenLoad(t *testing.T) {
	weights := []int{1, 1, 2, 3, 5, 8, 13, 21} // instance i's share of the requests: 54 in all
	for _, tc := range []struct {
		name   string
		limit  int
		per    time.Duration
		shards int
	}{
		{"default limit", 100, time.Minute, 1},
		{"one shard", 6_400, time.Minute, 1},   // 107 a second: leases of up to 64
		{"four shards", 2_000, time.Second, 4}, // leases of up to 31
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachStore(t, func(t *testing.T, st store.Store) {
				clock := testenv.MidMinute()
				limits := instances(st, clock.Now, len(weights))
				for _, times := range []int{1, 2} { // offered the limit, then twice it
					offered, total := make([]int, len(weights)), 0
					for i, w := range weights {
						offered[i] = (times*tc.limit*w + 53) / 54 // rounded up: at least times × limit in all
						total += offered[i]
					}
					low := least(len(weights), len(weights), tc.limit, tc.shards, total)
					got := raceUneven(t, limits, "key:"+strconv.Itoa(times), tc.limit, tc.per, offered)
					if got > tc.limit || got < low {
						t.Errorf("%d offered unevenly at a limit of %d: %d admitted, want %d to %d", total, tc.limit, got, low, tc.limit)
					} else {
						t.Logf("%d offered unevenly at a limit of %d: %d admitted (bound %d)", total, tc.limit, got, low)
					}
				}
			})
		})
	}
}

// One instance serving a key's requests many at once (a tally serve on
// DynamoDB) holds one lease at a time: it leaves at most MostLeased−1
// places taken and unused however many requests are in flight.
func TestOneInstanceServingManyAtOnce(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.MidMinute()
		one := instances(st, clock.Now, 1)[0]
		const inFlight, limit, offered = 16, 6_400, 3_200 // one shard, leases of up to 64
		limits := make([]*ratelimit.Shared, inFlight)
		for i := range limits {
			limits[i] = one
		}
		if got := race(t, limits, "key:busy", limit, time.Minute, offered); got != offered {
			t.Errorf("%d offered at once through one instance at a limit of %d: %d admitted, want all", offered, limit, got)
		}
		it, err := st.Get(context.Background(), keys.RateShard("key:busy", clock.Now().Truncate(time.Minute).Unix(), 0))
		if err != nil {
			t.Fatal(err)
		}
		if unused := int(it.Nums["n"]) - offered; unused > ratelimit.MostLeased(limit)-1 {
			t.Errorf("%d requests, %d at once through one instance: %d places taken and unused, want at most %d", offered, inFlight, unused, ratelimit.MostLeased(limit)-1)
		}
	})
}

// A request that finds its shard full counts in another: a shard filled
// (here by hand, as uneven load would) refuses nobody while the others
// have room.
func TestAFullShardSendsRequestsToTheOthers(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.MidMinute()
		const limit, per, share = 160, 100 * time.Millisecond, 40 // 1,600 a second: 4 shards of 40
		window := clock.Now().Truncate(per).Unix()
		if _, err := st.Update(context.Background(), store.Op{Kind: store.OpUpdate, Key: keys.RateShard("key:uneven", window, 0),
			Add: map[string]int64{"n": share}, ExpiresAt: time.Now().Add(time.Hour).Unix()}); err != nil {
			t.Fatal(err)
		}
		limits := instances(st, clock.Now, 1)
		for i := range limit - share {
			if d, err := limits[0].AllowPer(context.Background(), "key:uneven", limit, per); err != nil || !d.Allowed {
				t.Fatalf("request %d with shard 0 full and %d places left: %+v, %v", i+1, limit-share-i, d, err)
			}
		}
		if d, _ := limits[0].AllowPer(context.Background(), "key:uneven", limit, per); d.Allowed || d.Remaining != 0 {
			t.Errorf("request past the limit: %+v, want refused with nothing remaining", d)
		}
	})
}

// A failed conditional write costs a write unit like one that applies: an
// instance that has seen a bucket full refuses its later requests in the
// window from memory, writing nothing, with the headers' values still
// right; another instance pays one write to learn it, then none.
func TestRefusedRequestsWriteNothing(t *testing.T) {
	eachMeteredStore(t, func(t *testing.T, st store.Store, writes func() float64) {
		clock := testenv.MidMinute()
		limits := instances(st, clock.Now, 2)
		a, b := limits[0], limits[1]
		reset := clock.Now().Truncate(time.Minute).Add(time.Minute)
		ctx := context.Background()
		for i := range 3 {
			d, err := a.Allow(ctx, "ip:1", 3)
			if err != nil || !d.Allowed || d.Remaining != 2-i || !d.Reset.Equal(reset) {
				t.Fatalf("request %d: %+v, %v; want allowed, %d remaining, reset %v", i+1, d, err, 2-i, reset)
			}
		}
		if got := writes(); got != 3 {
			t.Errorf("3 admitted requests billed %v write units, want 3", got)
		}
		for _, lim := range []struct {
			name   string
			shared *ratelimit.Shared
			first  float64
		}{{"the instance that filled it", a, 0}, {"another instance", b, 1}} {
			for i := range 5 {
				d, err := lim.shared.Allow(ctx, "ip:1", 3)
				if err != nil || d.Allowed || d.Remaining != 0 || d.Limit != 3 || !d.Reset.Equal(reset) || d.Wait != 40*time.Second {
					t.Fatalf("%s, refused request %d: %+v, %v; want refused, 0 remaining, reset %v in 40s", lim.name, i+1, d, err, reset)
				}
				want := 0.0
				if i == 0 {
					want = lim.first
				}
				if got := writes(); got != want {
					t.Errorf("%s, refused request %d billed %v write units, want %v", lim.name, i+1, got, want)
				}
			}
		}
		clock.Advance(40 * time.Second) // the next window
		if d, err := b.Allow(ctx, "ip:1", 3); err != nil || !d.Allowed || d.Remaining != 2 {
			t.Errorf("next window: %+v, %v; want allowed, 2 remaining", d, err)
		}

		// Sharded: an instance that did not fill the window learns each
		// shard full at most once.
		const limit, per = 160, 100 * time.Millisecond // 4 shards
		race(t, []*ratelimit.Shared{a}, "key:big", limit, per, 2*limit)
		writes()
		var learning float64
		for i := range 20 {
			if d, _ := b.AllowPer(ctx, "key:big", limit, per); d.Allowed || d.Remaining != 0 {
				t.Fatalf("refused request %d on another instance: %+v", i+1, d)
			}
			got := writes()
			if learning += got; i >= 2 && got != 0 {
				t.Errorf("refused request %d on another instance billed %v write units, want none", i+1, got)
			}
		}
		if learning > 4 {
			t.Errorf("another instance learned 4 full shards with %v write units, want at most 4", learning)
		}
	})
}

// Remaining counts down with the requests admitted: for a bucket of one
// shard exactly (TestRefusedRequestsWriteNothing), for one of many within
// a tenth of the limit (the spread of the shards' counts, scaled).
func TestRemainingFollowsTheCount(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.MidMinute()
		limits := instances(st, clock.Now, 1)
		const limit, per = 2_000, time.Second // 4 shards of 500
		for i := range 1_000 {
			d, err := limits[0].AllowPer(context.Background(), "key:remaining", limit, per)
			if err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v, %v", i+1, d, err)
			}
			if left := limit - (i + 1); i >= 200 && (d.Remaining < left-limit/10 || d.Remaining > left+limit/10) {
				t.Errorf("after %d of %d: Remaining %d, want %d ± %d", i+1, limit, d.Remaining, left, limit/10)
				break
			}
		}
	})
}

// An instance serving a key back to back takes its places in leases that
// double with what it has served, up to MostLeased: 20 requests at a limit
// of 6,000 a minute take 6 writes (1, 1, 2, 4, 8 and 16 places), with
// Remaining counting down one by one; at the default limit (100 a minute)
// there is no lease, a write per request.
func TestLeasesSpareWrites(t *testing.T) {
	eachMeteredStore(t, func(t *testing.T, st store.Store, writes func() float64) {
		clock := testenv.MidMinute()
		for _, tc := range []struct {
			limit  int
			writes float64
		}{{100, 20}, {6_000, 6}} {
			limits := instances(st, clock.Now, 1)
			bucket := "key:" + strconv.Itoa(tc.limit)
			for i := range 20 {
				d, err := limits[0].Allow(context.Background(), bucket, tc.limit)
				if err != nil || !d.Allowed || d.Remaining != tc.limit-1-i {
					t.Fatalf("limit %d, request %d: %+v, %v; want allowed, %d remaining", tc.limit, i+1, d, err, tc.limit-1-i)
				}
			}
			if got := writes(); got != tc.writes {
				t.Errorf("20 requests back to back at a limit of %d a minute billed %v write units, want %v", tc.limit, got, tc.writes)
			}
		}
	})
}

// A lease is no more than its instance, at its rate in the window, will
// use before the window ends: one serving a request a second through a
// minute leaves at most one place unused (the bound is MostLeased−1, 63).
func TestALeaseIsWhatTheInstanceWillUse(t *testing.T) {
	eachStore(t, func(t *testing.T, st store.Store) {
		start := testenv.MidMinute().Now().Truncate(time.Minute)
		clock := testenv.NewClock(start)
		limits := instances(st, clock.Now, 1)
		const limit = 6_400 // one shard, leases of up to 64
		admitted := 0
		for range 60 {
			if d, err := limits[0].Allow(context.Background(), "key:slow", limit); err != nil || !d.Allowed {
				t.Fatalf("request %d: %+v, %v", admitted+1, d, err)
			}
			admitted++
			clock.Advance(time.Second)
		}
		it, err := st.Get(context.Background(), keys.RateShard("key:slow", start.Unix(), 0))
		if err != nil {
			t.Fatal(err)
		}
		if taken := int(it.Nums["n"]); taken < admitted || taken > admitted+1 {
			t.Errorf("a request a second for a minute: %d places taken for %d admitted, want at most 1 unused", taken, admitted)
		}
	})
}
