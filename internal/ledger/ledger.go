// Package ledger keeps what brands owe their partners: per partner and
// currency, balance counters (pending, owed, in payout, paid) and, for
// each approved conversion not yet in a payout, an owed entry that a
// payout claims. Every change is a list of operations that its caller
// writes in the same transaction as the conversion's (or payout's) own
// change, so the books move with the states and never need a scan.
//
// The invariant the tests hold: owed + inPayout + paid equals the sum of
// the payouts of the partner's approved conversions, and pending the sum
// of its pending ones. A reversal always takes its amount from owed; when
// the conversion was still unclaimed its entry goes with it, else a
// negative entry (a clawback) waits for the next payout.
package ledger

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/store"
)

// Names of the balance counters.
const (
	pending  = "pending"
	owed     = "owed"
	inPayout = "inPayout"
	paid     = "paid"
)

// Entry is an owed entry: an amount that waits for a payout.
type Entry struct {
	Key         store.Key
	PartnerID   string
	AmountCents int64
}

// move adds deltas to the balance of c's partner in c's currency.
func move(c tally.Conversion, add map[string]int64) store.Op {
	return store.Increment(keys.Balance(c.BrandID, c.PartnerID, c.Currency, keys.ShardOf(c.ID)), add)
}

// Move adds deltas to a partner's balance, in the shard of id (the
// payout that moves it).
func Move(brandID, partnerID, currency, id string, owedCents, inPayoutCents, paidCents int64) store.Op {
	add := map[string]int64{}
	for name, v := range map[string]int64{owed: owedCents, inPayout: inPayoutCents, paid: paidCents} {
		if v != 0 {
			add[name] = v
		}
	}
	return store.Increment(keys.Balance(brandID, partnerID, currency, keys.ShardOf(id)), add)
}

// entryKey is the key of c's owed entry.
func entryKey(c tally.Conversion) store.Key {
	return keys.Owed(c.BrandID, c.Currency, approvedAt(c), c.ID)
}

func approvedAt(c tally.Conversion) time.Time {
	if c.ApprovedAt != nil {
		return c.ApprovedAt.Time
	}
	return c.CreatedAt.Time
}

// clawbackKey is the key of the negative entry of a reversed conversion
// that a payout had claimed.
func clawbackKey(c tally.Conversion) store.Key {
	return keys.Owed(c.BrandID, c.Currency, c.ReversedAt.Time, c.ID+"#clawback")
}

func entryItem(key store.Key, c tally.Conversion, amount int64) store.Item {
	return store.Item{Key: key, Attrs: map[string]string{"partnerId": c.PartnerID}, Nums: map[string]int64{"amount": amount}}
}

// Recorded is what a new conversion adds: its payout to pending, or when
// it is approved at once to owed, with its owed entry.
func Recorded(c tally.Conversion) []store.Op {
	switch {
	case c.PayoutCents == 0:
		return nil
	case c.Status == tally.ConversionApproved:
		return []store.Op{move(c, map[string]int64{owed: c.PayoutCents}), store.Put(entryItem(entryKey(c), c, c.PayoutCents))}
	default:
		return []store.Op{move(c, map[string]int64{pending: c.PayoutCents})}
	}
}

// Decided is what a pending conversion's approval or rejection moves.
func Decided(c tally.Conversion) []store.Op {
	switch {
	case c.PayoutCents == 0:
		return nil
	case c.Status == tally.ConversionApproved:
		return []store.Op{move(c, map[string]int64{pending: -c.PayoutCents, owed: c.PayoutCents}), store.Put(entryItem(entryKey(c), c, c.PayoutCents))}
	default:
		return []store.Op{move(c, map[string]int64{pending: -c.PayoutCents})}
	}
}

// Reversed is what the reversal of an approved conversion moves. claimed
// says whether a payout has its entry: then a clawback entry carries the
// amount into the next payout, else the entry goes, on the condition that
// it is still there (a payout racing the reversal makes it fail: read
// Claimed again and retry).
func Reversed(c tally.Conversion, claimed bool) []store.Op {
	if c.PayoutCents == 0 {
		return nil
	}
	ops := []store.Op{move(c, map[string]int64{owed: -c.PayoutCents})}
	if claimed {
		return append(ops, store.Put(entryItem(clawbackKey(c), c, -c.PayoutCents), store.NotExists()))
	}
	return append(ops, store.Delete(entryKey(c), store.Exists()))
}

// Claimed says whether a payout has claimed approved conversion c's owed
// entry (or it never had one: nothing then is owed for it).
func Claimed(ctx context.Context, st store.Store, c tally.Conversion) (bool, error) {
	if c.PayoutCents == 0 {
		return false, nil
	}
	_, err := st.Get(ctx, entryKey(c))
	switch {
	case err == nil:
		return false, nil
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	}
	return false, err
}

// Balances sums a partner's counters per currency, in currency order.
func Balances(ctx context.Context, st store.Store, brandID, partnerID string) ([]tally.Balance, error) {
	byCurrency := map[string]*tally.Balance{}
	q := store.Query{PK: keys.BalancePK(brandID, partnerID), Limit: 1000}
	for {
		page, err := st.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			currency, _, _ := strings.Cut(it.SK, "#")
			b := byCurrency[currency]
			if b == nil {
				b = &tally.Balance{Currency: currency}
				byCurrency[currency] = b
			}
			b.PendingCents += it.Nums[pending]
			b.OwedCents += it.Nums[owed]
			b.InPayoutCents += it.Nums[inPayout]
			b.PaidCents += it.Nums[paid]
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			break
		}
	}
	out := make([]tally.Balance, 0, len(byCurrency))
	for _, b := range byCurrency {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(a, b tally.Balance) int { return cmp.Compare(a.Currency, b.Currency) })
	return out, nil
}

// Owed lists a brand's owed entries in currency, those that became owed
// through the UTC day through (empty: all), of the partners keep keeps.
func Owed(ctx context.Context, st store.Store, brandID, currency, through string, keep func(partnerID string) bool) ([]Entry, error) {
	var out []Entry
	for shard := range keys.Shards {
		q := store.Query{PK: keys.OwedPK(brandID, currency, shard), Limit: 1000}
		if through != "" {
			q.SKTo = keys.OwedThrough(through)
		}
		for {
			page, err := st.Query(ctx, q)
			if err != nil {
				return nil, err
			}
			for _, it := range page.Items {
				if p := it.Attrs["partnerId"]; keep(p) {
					out = append(out, Entry{Key: it.Key, PartnerID: p, AmountCents: it.Nums["amount"]})
				}
			}
			if q.Cursor = page.Cursor; q.Cursor == "" {
				break
			}
		}
	}
	return out, nil
}

// Claim is the operation that takes entry e into a payout: it fails when
// the entry is gone (another payout, or a reversal, took it first).
func Claim(e Entry) store.Op { return store.Delete(e.Key, store.Exists()) }
