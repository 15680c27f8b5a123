package httpapi_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
	"github.com/tally-hq/tally/internal/testenv"
)

// untracked is where a click past the limit lands: the destination with
// an empty {click_id}.
const untracked = "https://shop.example/p?c="

// The tracking link records at most ClickRateLimit clicks a minute from
// one address on one offer, exactly however many race; the visitor past
// it is redirected all the same, untracked. Other addresses, other
// offers and the next minute are counted apart.
func TestClickRateLimitPerOfferAndAddress(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		clock := testenv.MidMinute() // the race cannot straddle two minutes
		cfg := behindProxy()
		cfg.ClickRateLimit = 15
		e := newEnv(t, st, cfg, service.WithClock(clock.Now))
		brandID, key := e.brand()
		offerID := e.offer(key, clickDest)
		partnerID := e.activePartner(brandID, key)
		link := "/c/" + offerID + "?pid=" + partnerID

		var wg sync.WaitGroup
		locations := make([]string, 40)
		for i := range locations {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := e.tryVisit(link, map[string]string{"X-Forwarded-For": "192.0.2.1", "User-Agent": browserUA})
				if err != nil || r.status != 302 {
					t.Errorf("click %d: %v %d %s, want 302", i+1, err, r.status, r.body)
					return
				}
				locations[i] = r.header.Get("Location")
			}()
		}
		wg.Wait()
		var tracked int
		for _, loc := range locations {
			switch {
			case loc == untracked:
			case strings.HasPrefix(loc, untracked+"clk_"):
				tracked++
			default:
				t.Errorf("Location %q, want the destination with or without a click id", loc)
			}
		}
		clicks := e.listAll("/api/v1/clicks", key)
		if tracked != 15 || len(clicks) != 15 {
			t.Errorf("40 clicks at once from one address at a limit of 15: %d redirected with a click id, %d recorded; want 15 and 15", tracked, len(clicks))
		}
		if bursts := len(e.listAll("/api/v1/clicks?minScore=1", key)); bursts != 5 { // ip_velocity alone scores 40
			t.Errorf("%d of the 15 recorded clicks raise ip_velocity, want 5 (the 11th to the 15th)", bursts)
		}

		// Counted apart: another address, another offer, the next minute.
		other := "/c/" + e.offer(key, clickDest) + "?pid=" + partnerID
		for _, c := range []struct{ what, link, ip string }{
			{"another address", link, "192.0.2.2"},
			{"another offer", other, "192.0.2.1"},
		} {
			if loc := e.must(302, e.clickFrom(c.link, c.ip, browserUA)).header.Get("Location"); loc == untracked {
				t.Errorf("%s: redirected untracked", c.what)
			}
		}
		if loc := e.must(302, e.clickFrom(link, "192.0.2.1", browserUA)).header.Get("Location"); loc != untracked {
			t.Errorf("one more in the minute: Location %q, want untracked", loc)
		}
		clock.Advance(40 * time.Second)
		if loc := e.must(302, e.clickFrom(link, "192.0.2.1", browserUA)).header.Get("Location"); loc == untracked {
			t.Errorf("the next minute: redirected untracked")
		}
		// An unknown offer is still not found, limit or not.
		if r := e.clickFrom("/c/off_unknown?pid="+partnerID, "192.0.2.1", browserUA); r.status != 404 || r.errorCode() != "not_found" {
			t.Errorf("unknown offer: %d %s, want 404 not_found", r.status, r.body)
		}
	})
}

// A click past the limit costs no write once the instance has seen the
// limit reached in the minute (the first costs the failed transaction
// that finds it), and a burst click (past the 10th) costs one transaction
// once the instance has seen the burst.
func TestClicksPastTheLimitWriteNothing(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		counted := testenv.CountWrites(st)
		clock := testenv.MidMinute()
		cfg := behindProxy()
		cfg.ClickRateLimit = 12
		opts := []service.Option{service.WithClock(clock.Now)}
		if _, ok := st.(*dynamo.Store); ok { // the wrapper hides it from servicetest
			opts = append(opts, service.ForDynamoDB())
		}
		e := newEnv(t, counted, cfg, opts...)
		brandID, key := e.brand()
		link := "/c/" + e.offer(key, clickDest) + "?pid=" + e.activePartner(brandID, key)
		e.must(302, e.clickFrom(link, "192.0.2.9", browserUA)) // the instance reads what it caches
		counted.Take()

		// Clicks 1–10: one transaction each; the 11th finds the burst (a
		// failed transaction, then one with ip_velocity), the 12th does not
		// need to; the 13th finds the limit; the rest write nothing.
		for i, want := range []int64{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 1, 1, 0, 0, 0, 0, 0} {
			r := e.must(302, e.clickFrom(link, "192.0.2.1", browserUA))
			if got := counted.Take(); got != want {
				t.Errorf("click %d from one address at a limit of 12: %d writes, want %d", i+1, got, want)
			}
			if past := r.header.Get("Location") == untracked; past != (i >= 12) {
				t.Errorf("click %d: Location %q", i+1, r.header.Get("Location"))
			}
		}
	})
}
