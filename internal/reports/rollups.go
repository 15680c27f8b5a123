package reports

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/ledger"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Rollups is how the rollups of a new conversion or click are kept.
type Rollups interface {
	// MarkConversion and MarkClick mark a new record's item for what the
	// table's stream does with it.
	MarkConversion(item *store.Item)
	MarkClick(item *store.Item, currency string, highRisk bool)
	// Add returns the operations, in the record's write, that add its
	// counters to its rollups (Increments).
	Add(brandID, id string, at time.Time, offerID, partnerID, currency string, add map[string]int64) []store.Op
	// Conversion returns the operations, in a new conversion's write,
	// that count it: its rollups and its partner's balance (ledger).
	Conversion(c tally.Conversion) []store.Op
}

// InWrite adds a new record's counters to its rollups in the record's own
// transaction: where no stream feeds the rollups (the local server).
type InWrite struct{}

func (InWrite) MarkConversion(*store.Item)          {}
func (InWrite) MarkClick(*store.Item, string, bool) {}
func (InWrite) Add(brandID, id string, at time.Time, offerID, partnerID, currency string, add map[string]int64) []store.Op {
	return Increments(brandID, id, at, offerID, partnerID, currency, add)
}

func (InWrite) Conversion(c tally.Conversion) []store.Op {
	return append(ConversionIncrements(c, Created(c)), ledger.Recorded(c, c.ID)...)
}

// FromStream leaves a new conversion's or click's rollups to the table's
// stream: their transactions do not add to them, and RollUp adds a batch
// of them at once, one write per rollup item rather than two per
// conversion or click (the AWS functions: the rollup function reads the
// stream there). Reports then lag by as long as the stream takes, seconds.
type FromStream struct{}

func (FromStream) MarkConversion(item *store.Item) { item.Attrs[rolledUpAttr] = rolledUpFromStream }

func (FromStream) MarkClick(item *store.Item, currency string, highRisk bool) {
	markForStream(item, currency, highRisk)
}

func (FromStream) Add(string, string, time.Time, string, string, string, map[string]int64) []store.Op {
	return nil
}

func (FromStream) Conversion(tally.Conversion) []store.Op { return nil }

// rolledUpAttr marks a conversion or click item whose rollups the stream
// adds (the rollup function's filter passes inserts that carry it). Items
// written with their rollups, before this existed or by the local server,
// lack it, so nothing is counted twice.
const rolledUpAttr = "rollup"

// rolledUpFromStream is rolledUpAttr's value.
const rolledUpFromStream = "stream"

// Attributes of a click marked for the stream: what its rollups need that
// the click does not keep (the offer's currency, the brand's threshold at
// the time).
const (
	clickCurrencyAttr = "currency"
	clickHighRiskAttr = "highRisk"
)

// markForStream marks a click item for the stream's rollups.
func markForStream(it *store.Item, currency string, highRisk bool) {
	it.Attrs = map[string]string{rolledUpAttr: rolledUpFromStream, clickCurrencyAttr: currency}
	if highRisk {
		it.Attrs[clickHighRiskAttr] = "1"
	}
}

// StreamChange is an item the table's stream reports as inserted: its
// sequence number in its stream shard and its new image.
type StreamChange struct {
	Seq  string
	Item store.Item
}

// rollupCheckpointTTL keeps a shard's checkpoint past the stream's 24-hour
// retention: no record of the shard can arrive after it.
const rollupCheckpointTTL = 48 * time.Hour

// RollUp adds the conversions and clicks among changes (one stream shard's
// records, in the shard's order) to the report rollups, exactly once
// however often and however cut the batches come: a stream batch is retried whole, from
// a record, or bisected, and a timed-out invocation may still be writing
// while its retry runs. The shard's checkpoint item holds the sequence
// number of the last change added; each transaction adds the increments of
// consecutive changes after it, summed per rollup item, and moves the
// checkpoint on with the condition that it is still where it was read.
// Changes at or before the checkpoint are skipped; a failed condition
// means another invocation got there first, and the checkpoint is read
// again. A change whose item cannot be read is left out and the others
// are added: the error is then an *UnreadableChangesError naming it.
func (s *Service) RollUp(ctx context.Context, shard string, changes []StreamChange) error {
	var recs []rolledRecord
	var unreadable UnreadableChangesError
	for _, ch := range changes {
		if ch.Item.Attrs[rolledUpAttr] != rolledUpFromStream {
			continue
		}
		ops, err := streamIncrements(ch.Item, shard)
		if err != nil {
			unreadable.Seqs = append(unreadable.Seqs, ch.Seq)
			unreadable.Errs = append(unreadable.Errs, err)
			continue
		}
		recs = append(recs, rolledRecord{seq: ch.Seq, ops: ops})
	}
	if err := s.rollUp(ctx, shard, recs); err != nil {
		return err
	}
	if len(unreadable.Seqs) > 0 {
		return &unreadable
	}
	return nil
}

// UnreadableChangesError names the changes RollUp left out because their
// items cannot be read (no retry makes them readable); it added the others.
type UnreadableChangesError struct {
	Seqs []string // their sequence numbers, in the batch's order
	Errs []error  // why, one per sequence number
}

func (e *UnreadableChangesError) Error() string {
	return fmt.Sprintf("%d stream records cannot be read (first %s: %v)", len(e.Seqs), e.Seqs[0], e.Errs[0])
}

// rollUp adds recs, in their shard's order, past the shard's checkpoint.
func (s *Service) rollUp(ctx context.Context, shard string, recs []rolledRecord) error {
	key := keys.RollupCheckpoint(shard)
	done, err := s.rolledUpTo(ctx, key)
	for err == nil {
		i := 0
		for i < len(recs) && !seqAfter(recs[i].seq, done) {
			i++
		}
		if recs = recs[i:]; len(recs) == 0 {
			return nil
		}
		ops, n := sumRollups(recs)
		last := recs[n-1].seq
		cond := store.NotExists()
		if done != "" {
			cond = store.AttrEquals("seq", done)
		}
		ops = append(ops, store.Put(store.Item{Key: key, Attrs: map[string]string{"seq": last}, ExpiresAt: s.db.Now().Add(rollupCheckpointTTL).Unix()}, cond))
		err = s.db.Transact(ctx, ops...)
		switch _, failed := store.FailedOp(err); {
		case failed:
			done, err = s.rolledUpTo(ctx, key)
		case err == nil:
			done = last
		}
	}
	return fmt.Errorf("roll up shard %s: %w", shard, err)
}

// streamIncrements are the rollup increments of a new conversion or click.
// They go to the rollup shard of the stream shard, not of the record:
// reports sum every shard, and a batch's records of one offer and partner
// then add to two items, not eight. Writes to them come one batch at a
// time, so they need no spreading.
func streamIncrements(it store.Item, shard string) ([]store.Op, error) {
	if strings.HasPrefix(it.SK, "clk_") {
		var c tally.Click
		if err := records.Decode(it, &c); err != nil {
			return nil, err
		}
		return Increments(c.BrandID, shard, c.CreatedAt.Time, c.OfferID, c.PartnerID, it.Attrs[clickCurrencyAttr], ClickCounts(it.Attrs[clickHighRiskAttr] != "")), nil
	}
	var c tally.Conversion
	if err := records.Decode(it, &c); err != nil {
		return nil, err
	}
	ops := Increments(c.BrandID, shard, c.CreatedAt.Time, c.OfferID, c.PartnerID, c.Currency, Created(c))
	return append(ops, ledger.Recorded(c, shard)...), nil
}

// rolledRecord is a conversion's (or a click's) rollup increments and
// the sequence number of its stream record.
type rolledRecord struct {
	seq string
	ops []store.Op
}

// sumRollups sums the increments of the first records of recs per rollup
// item (and per balance item and owed entry, package ledger), as many
// records as leave room in a transaction for the checkpoint, and returns
// the updates and how many records they hold.
func sumRollups(recs []rolledRecord) ([]store.Op, int) {
	sums := map[store.Key]map[string]int64{}
	n := 0
	for _, c := range recs {
		fresh := 0
		for _, op := range c.ops {
			if sums[op.Key] == nil {
				fresh++
			}
		}
		if len(sums)+fresh > store.MaxTransactOps-1 {
			break
		}
		for _, op := range c.ops {
			if sums[op.Key] == nil {
				sums[op.Key] = map[string]int64{}
			}
			for name, v := range op.Add {
				sums[op.Key][name] += v
			}
		}
		n++
	}
	keys := slices.SortedFunc(maps.Keys(sums), func(a, b store.Key) int { return cmp.Or(cmp.Compare(a.PK, b.PK), cmp.Compare(a.SK, b.SK)) })
	ops := make([]store.Op, 0, len(keys)+1)
	for _, k := range keys {
		ops = append(ops, store.Increment(k, sums[k]))
	}
	return ops, n
}

// rolledUpTo is the sequence number of the last change the shard's
// checkpoint says was added, "" when none was.
func (s *Service) rolledUpTo(ctx context.Context, key store.Key) (string, error) {
	it, err := s.db.Get(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	return it.Attrs["seq"], err
}

// seqAfter reports whether stream sequence number a comes after b ("" is
// before all). They are decimal numbers of up to 40 digits, without
// leading zeros.
func seqAfter(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

// ConversionIncrements add counter deltas to the report rollups of c's creation: its
// UTC day and its UTC quarter hour.
func ConversionIncrements(c tally.Conversion, add map[string]int64) []store.Op {
	return Increments(c.BrandID, c.ID, c.CreatedAt.Time, c.OfferID, c.PartnerID, c.Currency, add)
}

// Increments add counter deltas to the report rollups of a record
// (a conversion, a click) made at a time: its UTC day and its UTC quarter
// hour, in the shard of id (the record's, or for RollUp its stream
// shard's).
func Increments(brandID, id string, at time.Time, offerID, partnerID, currency string, add map[string]int64) []store.Op {
	at, shard := at.UTC(), keys.ShardOf(id)
	return []store.Op{
		store.Increment(keys.Rollup(brandID, shard, at.Format(time.DateOnly), offerID, partnerID, currency), add),
		store.Increment(keys.RollupQuarter(brandID, shard, at.Truncate(15*time.Minute).Format(quarterLayout), offerID, partnerID, currency), add),
	}
}

// quarterLayout names a UTC quarter hour in rollup keys.
const quarterLayout = "2006-01-02T15:04"

// Created counts a new conversion into its rollup. Money counts for
// conversions that are not rejected.
func Created(c tally.Conversion) map[string]int64 {
	return map[string]int64{"conversions": 1, c.Status: 1, "revenueCents": c.RevenueCents, "payoutCents": c.PayoutCents}
}

// Decided moves a conversion out of its status (pending, or approved for
// a reversal) into to.
func Decided(c tally.Conversion, to string) map[string]int64 {
	from := tally.ConversionPending
	if to == tally.ConversionReversed {
		from = tally.ConversionApproved
	}
	add := map[string]int64{from: -1, to: 1}
	if to == tally.ConversionRejected || to == tally.ConversionReversed {
		add["revenueCents"], add["payoutCents"] = -c.RevenueCents, -c.PayoutCents
	}
	return add
}

// ClickCounts is what a click adds to its rollups.
func ClickCounts(highRisk bool) map[string]int64 {
	counts := map[string]int64{"clicks": 1}
	if highRisk {
		counts["highRiskClicks"] = 1
	}
	return counts
}
