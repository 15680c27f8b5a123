package dynamo_test

import (
	"errors"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// TestExpiredItemsAreDeleted shows that DynamoDB expires what the store
// writes: an item whose ExpiresAt (the ttl attribute) has passed on the real
// clock is gone after DynamoDB Local's TTL sweep, and a live one stays.
//
// Two quirks of DynamoDB Local 1.25.1's sweeper (TimeToLiveDeletionJob) shape
// it; real DynamoDB has neither:
//
//   - It builds the key of each item it deletes from every attribute in the
//     table's AttributeDefinitions (pk, sk and the keys of gsi1..gsi3), not
//     from the key schema. An expired item without one of them (one that
//     is not in every index) makes it throw, and then it never sweeps that
//     table again in that process, silently. So every item here carries all
//     three index keys.
//   - It scans 20 items of a table, then sleeps 10 s, and the tables with
//     TTL share a few threads, so on the DynamoDB Local that the whole run
//     shares (scripts/test.sh) a sweep may take minutes, or never come if
//     another test's table stalled it. So the table is on a DynamoDB Local
//     of the test's own, and holds fewer than 20 items: one pass of the
//     sweep, which starts within a second or so of TTL being enabled.
func TestExpiredItemsAreDeleted(t *testing.T) {
	client, table := dynamotest.NewPrivateTableWithTTL(t)
	s := dynamo.New(client, table)

	now := time.Now()
	item := func(sk string, expires time.Time) store.Item {
		return store.Item{
			Key:       key("ttl", sk),
			GSI1:      store.IndexKey{PK: "ttl1", SK: sk},
			GSI2:      store.IndexKey{PK: "ttl2", SK: sk},
			GSI3:      store.IndexKey{PK: "ttl3", SK: sk},
			Attrs:     map[string]string{"a": "x"},
			ExpiresAt: expires.Unix(),
		}
	}
	expired := []store.Item{
		item("just-expired", now.Add(-10*time.Second)),
		item("long-expired", now.Add(-15*time.Hour)),
	}
	live := item("live", now.Add(time.Hour))
	put(t, s, append(expired, live)...)

	const timeout = 30 * time.Second
	start := time.Now()
	deadline := start.Add(timeout)
	for _, it := range expired {
		for {
			_, err := s.Get(t.Context(), it.Key)
			if errors.Is(err, store.ErrNotFound) {
				break
			}
			if err != nil {
				t.Fatalf("Get(%v): %v", it.Key, err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v (expired at %d, now %d) still there after %v", it.Key, it.ExpiresAt, time.Now().Unix(), timeout)
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	t.Logf("expired items gone after %v", time.Since(start).Round(10*time.Millisecond))

	got, err := s.Get(t.Context(), live.Key)
	if err != nil {
		t.Fatalf("Get(%v), the live item: %v", live.Key, err)
	}
	if got.ExpiresAt != live.ExpiresAt {
		t.Errorf("live item ExpiresAt = %d, want %d", got.ExpiresAt, live.ExpiresAt)
	}
}
