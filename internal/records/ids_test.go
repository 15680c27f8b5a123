package records

import (
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/keys"
)

// On the embedded store every new identifier lies in shard 0, so that a
// commit round's items land in one shard's pages; a derived one is the same
// for the same seed. Spread identifiers fall in every shard.
func TestIdentifierPlacement(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) // no store: any time will do
	spread := map[int]bool{}
	for i := range 200 {
		id := ShardZeroIDs{}.New("cnv_", at)
		if keys.ShardOf(id) != 0 || !strings.HasPrefix(id, "cnv_") {
			t.Fatalf("ShardZeroIDs made %q, in shard %d", id, keys.ShardOf(id))
		}
		seed := "evt_1/sub_" + string(rune('a'+i%26))
		d := ShardZeroIDs{}.Derived("wh_", at, seed)
		if keys.ShardOf(d) != 0 || d != (ShardZeroIDs{}).Derived("wh_", at, seed) {
			t.Fatalf("ShardZeroIDs derived %q, in shard %d, or another the second time", d, keys.ShardOf(d))
		}
		spread[keys.ShardOf(SpreadIDs{}.New("cnv_", at))] = true
	}
	if len(spread) != keys.Shards {
		t.Errorf("SpreadIDs used shards %v, want all %d", spread, keys.Shards)
	}
}
