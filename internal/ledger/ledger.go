// Package ledger keeps what brands owe their partners: per partner and
// currency, balance counters (pending, owed, in payout, paid) and owed
// entries, the amounts a payout claims. Every change is a list of
// operations that its caller writes in the same transaction as the
// conversion's (or payout's) own change, so the books move with the
// states and never need a scan.
//
// An owed entry holds an amount and a count of conversions: one approved
// conversion's, or on AWS the sum of a stream batch's conversions of one
// partner and day (one write for many), or a reversal's negative amount.
// A reversal never touches the entry of its conversion: it adds a negative
// entry, which the next payout sums with the rest, so a reversal and a
// payout never race for one item. The invariant the tests hold: owed +
// inPayout + paid is the sum of the payouts of the partner's approved
// conversions, pending that of its pending ones.
package ledger

import (
	"cmp"
	"context"
	"slices"

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

// Entry is an owed entry: an amount that waits for a payout, and how
// many approved conversions it sums (0 for a reversal).
type Entry struct {
	Key         store.Key
	PartnerID   string
	AmountCents int64
	Count       int64
}

// move adds deltas to the balance of c's partner in c's currency, in the
// shard of spread.
func move(c tally.Conversion, spread string, add map[string]int64) store.Op {
	return store.Increment(keys.Balance(c.BrandID, c.PartnerID, c.Currency, keys.ShardOf(spread)), add)
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

// owe adds c's payout to the owed entry entryID of its partner and day.
func owe(c tally.Conversion, entryID string) store.Op {
	at := c.CreatedAt.Time
	if c.ApprovedAt != nil {
		at = c.ApprovedAt.Time
	}
	return store.Increment(keys.Owed(c.BrandID, c.Currency, at, c.PartnerID, entryID), map[string]int64{"amount": c.PayoutCents, "count": 1})
}

// Recorded is what a new conversion adds: its payout to pending, or when
// it is approved at once to owed, with an owed entry. In a conversion's
// own write spread is its id; when a stream batch adds many (package
// reports), it names the stream shard, so that the batch's conversions of
// one partner and day add to one balance item and one owed entry.
func Recorded(c tally.Conversion, spread string) []store.Op {
	switch {
	case c.PayoutCents == 0:
		return nil
	case c.Status == tally.ConversionApproved:
		return []store.Op{move(c, spread, map[string]int64{owed: c.PayoutCents}), owe(c, spread)}
	default:
		return []store.Op{move(c, spread, map[string]int64{pending: c.PayoutCents})}
	}
}

// Decided is what a pending conversion's approval or rejection moves.
func Decided(c tally.Conversion) []store.Op {
	switch {
	case c.PayoutCents == 0:
		return nil
	case c.Status == tally.ConversionApproved:
		return []store.Op{move(c, c.ID, map[string]int64{pending: -c.PayoutCents, owed: c.PayoutCents}), owe(c, c.ID)}
	default:
		return []store.Op{move(c, c.ID, map[string]int64{pending: -c.PayoutCents})}
	}
}

// Reversed is what the reversal of an approved conversion moves: its
// payout out of owed, and a negative entry that the next payout
// subtracts (a clawback, when a payout had the conversion already).
func Reversed(c tally.Conversion) []store.Op {
	if c.PayoutCents == 0 {
		return nil
	}
	return []store.Op{
		move(c, c.ID, map[string]int64{owed: -c.PayoutCents}),
		store.Increment(keys.Owed(c.BrandID, c.Currency, c.ReversedAt.Time, c.PartnerID, c.ID+"-r"), map[string]int64{"amount": -c.PayoutCents}),
	}
}

// Balances sums a partner's counters per currency, in currency order.
func Balances(ctx context.Context, st store.Store, brandID, partnerID string) ([]tally.Balance, error) {
	all, err := sum(ctx, st, brandID, keys.BalanceSKPrefix(partnerID))
	if all[partnerID] == nil {
		return []tally.Balance{}, err
	}
	return all[partnerID], err
}

// AllBalances sums the counters of every partner of the brand with any,
// per partner and currency (in currency order): a query per shard, not
// one per partner.
func AllBalances(ctx context.Context, st store.Store, brandID string) (map[string][]tally.Balance, error) {
	return sum(ctx, st, brandID, "")
}

// sum reads the balance items whose sort keys start with prefix from
// every shard of the brand and sums them per partner and currency.
func sum(ctx context.Context, st store.Store, brandID, prefix string) (map[string][]tally.Balance, error) {
	type key struct{ partner, currency string }
	totals := map[key]*tally.Balance{}
	for shard := range keys.Shards {
		q := store.Query{PK: keys.BalancePK(brandID, shard), SKPrefix: prefix, Limit: 1000}
		for {
			page, err := st.Query(ctx, q)
			if err != nil {
				return nil, err
			}
			for _, it := range page.Items {
				partner, currency := keys.BalanceOf(it.SK)
				b := totals[key{partner, currency}]
				if b == nil {
					b = &tally.Balance{Currency: currency}
					totals[key{partner, currency}] = b
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
	}
	out := map[string][]tally.Balance{}
	for k, b := range totals {
		out[k.partner] = append(out[k.partner], *b)
	}
	for _, bs := range out {
		slices.SortFunc(bs, func(a, b tally.Balance) int { return cmp.Compare(a.Currency, b.Currency) })
	}
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
				if p := keys.OwedPartner(it.SK); keep(p) && it.Nums["amount"] != 0 {
					out = append(out, Entry{Key: it.Key, PartnerID: p, AmountCents: it.Nums["amount"], Count: it.Nums["count"]})
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
// the entry is not as read (another payout took it, or a stream batch
// added to it since).
func Claim(e Entry) store.Op {
	return store.Delete(e.Key, store.NumEquals("amount", e.AmountCents), store.NumEquals("count", e.Count))
}
