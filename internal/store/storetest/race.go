package storetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// race runs fn(0) … fn(n-1) in n goroutines released at once, and returns
// their errors.
func race(n int, fn func(i int) error) []error {
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// retry calls fn until it returns anything but store.ErrConflict, with
// jittered backoff, as callers of a store under contention must.
func retry(fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if !errors.Is(err, store.ErrConflict) || attempt == 200 {
			return err
		}
		backoff := time.Millisecond << min(attempt, 6)
		time.Sleep(backoff/2 + rand.N(backoff))
	}
}

// outcomes counts nil errors and condition failures of op index, and fails
// the test on any other error.
func outcomes(t *testing.T, errs []error, index int) (ok, failed int) {
	t.Helper()
	for i, err := range errs {
		if err == nil {
			ok++
			continue
		}
		if j, cf := store.FailedOp(err); cf && j == index {
			failed++
			continue
		}
		t.Errorf("goroutine %d: %v", i, err)
	}
	return ok, failed
}

func testRacePutNotExists(t *testing.T, e *env) {
	const n = 50
	k := e.key("p", "claim")
	errs := race(n, func(i int) error {
		return retry(func() error {
			return e.s.Transact(e.ctx, store.Put(store.Item{
				Key:   k,
				Attrs: map[string]string{"writer": fmt.Sprint(i)},
				Data:  fmt.Appendf(nil, "written by %d", i),
			}, store.NotExists()))
		})
	})
	ok, failed := outcomes(t, errs, 0)
	if ok != 1 || failed != n-1 {
		t.Fatalf("%d puts succeeded and %d failed their condition, want 1 and %d", ok, failed, n-1)
	}
	w := slices.Index(errs, nil)
	e.wantItem(t, store.Item{
		Key:   k,
		Attrs: map[string]string{"writer": fmt.Sprint(w)},
		Data:  fmt.Appendf(nil, "written by %d", w),
	})
}

func testRaceCounter(t *testing.T, e *env) {
	const workers, each = 40, 10
	k := e.key("p", "counter")
	seen := make([][]int64, workers)
	errs := race(workers, func(i int) error {
		for range each {
			var it store.Item
			err := retry(func() error {
				var err error
				it, err = e.s.Update(e.ctx, store.Increment(k, map[string]int64{"n": 1}))
				return err
			})
			if err != nil {
				return err
			}
			seen[i] = append(seen[i], it.Nums["n"])
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("goroutine %d: %v", i, err)
		}
	}
	e.wantItem(t, store.Item{Key: k, Nums: map[string]int64{"n": workers * each}})
	// Every increment saw its own result: together exactly 1..400.
	all := slices.Concat(seen...)
	slices.Sort(all)
	for i, v := range all {
		if v != int64(i+1) {
			t.Fatalf("Update results sorted: %v; want 1 to %d once each", all, workers*each)
		}
	}
}

func testRaceCappedCounter(t *testing.T, e *env) {
	const n, limit = 100, 30
	k := e.key("p", "capped")
	errs := race(n, func(int) error {
		return retry(func() error {
			return e.s.Transact(e.ctx, store.Increment(k, map[string]int64{"n": 1}, store.NumLess("n", limit)))
		})
	})
	ok, failed := outcomes(t, errs, 0)
	if ok != limit || failed != n-limit {
		t.Errorf("%d increments succeeded and %d failed their condition, want %d and %d", ok, failed, limit, n-limit)
	}
	e.wantItem(t, store.Item{Key: k, Nums: map[string]int64{"n": limit}})
}

func testRaceClaimAndCount(t *testing.T, e *env) {
	// Each goroutine claims one of five keys (as a dedupe record) and counts
	// the claim in one transaction; even ones put the claim first, odd ones
	// second. Exactly one claim per key may win, and the counter must count
	// exactly the winners.
	const n, claims = 40, 5
	counter := e.key("p", "counter")
	claim := func(i int) store.Key { return e.key("p", fmt.Sprintf("claim#%d", i%claims)) }
	errs := race(n, func(i int) error {
		put := store.Put(store.Item{Key: claim(i), Attrs: map[string]string{"by": fmt.Sprint(i)}}, store.NotExists())
		inc := store.Increment(counter, map[string]int64{"total": 1, fmt.Sprintf("k%d", i%claims): 1})
		return retry(func() error {
			if i%2 == 0 {
				return e.s.Transact(e.ctx, put, inc)
			}
			return e.s.Transact(e.ctx, inc, put)
		})
	})
	won := make([]int, claims)
	for i, err := range errs {
		switch j, cf := store.FailedOp(err); {
		case err == nil:
			won[i%claims]++
			e.wantItem(t, store.Item{Key: claim(i), Attrs: map[string]string{"by": fmt.Sprint(i)}})
		case cf && j == i%2:
		default:
			t.Errorf("goroutine %d: %v", i, err)
		}
	}
	if !slices.Equal(won, []int{1, 1, 1, 1, 1}) {
		t.Errorf("winners per claim: %v, want one each", won)
	}
	want := store.Item{Key: counter, Nums: map[string]int64{"total": claims}}
	for c := range claims {
		want.Nums[fmt.Sprintf("k%d", c)] = 1
	}
	e.wantItem(t, want)
}
