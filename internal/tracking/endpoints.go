package tracking

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Endpoint health: every recorded attempt updates the endpoint it went to (a
// webhook subscription or a partner's postback) in the same transaction as
// the attempt, so the counters are exact whatever repeats or crashes. The
// counters are top-level attributes of the endpoint's item (the record in
// its Data stays as configured):
//
//	status          "enabled" | "disabled"  (attr)
//	disabledReason  why it was disabled     (attr)
//	disabledAt      unix ms it was disabled (attr)
//	lastSuccessAt   unix ms of the last success (attr)
//	fails           consecutive failed attempts (num)
//	failingSince    unix ms of the first failure after the last success, 0 if none (num)
//	rev             changes with every write of the item (num)
//
// Writes that decide something (the first failure, the one that disables,
// a success that resets the counters, enable, PATCH) are conditioned on
// rev, so they apply to exactly the state they read and are retried on a
// fresh read otherwise; a failure that changes nothing but the count is a
// plain atomic add conditioned on the count staying under the threshold.
// Hence concurrent attempts count exactly and the endpoint is disabled
// exactly once.

// Defaults of the endpoint health thresholds (DESIGN "Delivery log and
// endpoint health").
const (
	DefaultDisableAfterFailures = 100
	DefaultDisableAfterFailing  = 5 * 24 * time.Hour
)

// lastSuccessRefresh is how stale lastSuccessAt may be while an endpoint
// keeps succeeding: a healthy endpoint's item is written at most this often,
// rather than on every delivery.
const lastSuccessRefresh = time.Minute

// endpointHealth is the health kept in an endpoint item's attributes.
type endpointHealth struct {
	status, reason string
	disabledAt     int64 // unix ms
	lastOK         int64 // unix ms, 0 = never
	fails          int64
	failingSince   int64 // unix ms, 0 = not failing
	rev            int64
}

func healthOf(it store.Item) endpointHealth {
	h := endpointHealth{
		status: it.Attrs["status"], reason: it.Attrs["disabledReason"],
		fails: it.Nums["fails"], failingSince: it.Nums["failingSince"], rev: it.Nums["rev"],
	}
	h.lastOK, _ = strconv.ParseInt(it.Attrs["lastSuccessAt"], 10, 64)
	h.disabledAt, _ = strconv.ParseInt(it.Attrs["disabledAt"], 10, 64)
	if h.status == "" {
		h.status = tally.EndpointEnabled
	}
	return h
}

// public is the health as the API shows it.
func (h endpointHealth) public() tally.EndpointHealth {
	out := tally.EndpointHealth{Status: h.status, DisabledReason: h.reason, ConsecutiveFailures: h.fails}
	if h.status == tally.EndpointDisabled {
		out.DisabledAt = ptrTo(tally.NewTime(time.UnixMilli(h.disabledAt)))
	} else {
		out.DisabledReason = ""
	}
	if h.lastOK != 0 {
		out.LastSuccessAt = ptrTo(tally.NewTime(time.UnixMilli(h.lastOK)))
	}
	if h.failingSince != 0 {
		out.FailingSince = ptrTo(tally.NewTime(time.UnixMilli(h.failingSince)))
	}
	return out
}

// newEndpointItem is a new endpoint's item: enabled, no history.
func newEndpointItem(key store.Key, record any) store.Item {
	return store.Item{Key: key, Attrs: map[string]string{"status": tally.EndpointEnabled}, Data: records.MustJSON(record)}
}

// replaceEndpointRecord rewrites an endpoint's configuration (its Data),
// keeping its health; cond holds only if nothing changed the item since it
// was read.
func replaceEndpointRecord(it store.Item, record any) store.Op {
	it.Data = records.MustJSON(record)
	it.Nums = cloneNums(it.Nums)
	it.Nums["rev"]++
	return store.Put(it, store.Exists(), store.NumEquals("rev", it.Nums["rev"]-1))
}

func cloneNums(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// healthConfig is when an endpoint is disabled.
type healthConfig struct {
	failures int64         // consecutive failed attempts
	failing  time.Duration // failing with no success for this long
}

// outcomeOp is the update that records an attempt's outcome on the endpoint
// whose item was read as it, or false when nothing needs writing (a healthy
// endpoint whose lastSuccessAt is fresh).
func (c healthConfig) outcomeOp(it store.Item, ok bool, now time.Time) (store.Op, bool) {
	h := healthOf(it)
	ms := now.UnixMilli()
	up := store.Op{Kind: store.OpUpdate, Key: it.Key, Set: map[string]string{}, Add: map[string]int64{"rev": 1}}
	if ok {
		if h.fails == 0 && h.failingSince == 0 {
			if ms-h.lastOK < lastSuccessRefresh.Milliseconds() {
				return store.Op{}, false
			}
			// Only a timestamp moves: no need to hold the rest still.
			up.Set["lastSuccessAt"] = strconv.FormatInt(ms, 10)
			up.Conds = []store.Cond{store.Exists()}
			return up, true
		}
		up.Set["lastSuccessAt"] = strconv.FormatInt(ms, 10)
		up.Add["fails"], up.Add["failingSince"] = -h.fails, -h.failingSince
		up.Conds = []store.Cond{store.Exists(), store.NumEquals("rev", h.rev)}
		return up, true
	}
	up.Add["fails"] = 1
	failingFor := time.Duration(0)
	if h.failingSince != 0 {
		failingFor = time.Duration(ms-h.failingSince) * time.Millisecond
	}
	if h.failingSince != 0 && (h.status == tally.EndpointDisabled || h.fails+1 < c.failures && failingFor < c.failing) {
		// Only the count moves, and it stays under the threshold: an
		// atomic add, which concurrent failures need not take turns for.
		up.Conds = []store.Cond{store.Exists(), store.NumEquals("failingSince", h.failingSince)}
		if h.status != tally.EndpointDisabled {
			up.Conds = append(up.Conds, store.NumLess("fails", c.failures-1))
		}
		return up, true
	}
	if h.failingSince == 0 {
		up.Add["failingSince"] = ms
		failingFor = 0
	}
	if h.status != tally.EndpointDisabled {
		switch {
		case h.fails+1 >= c.failures:
			up.Set["disabledReason"] = tally.DisabledConsecutiveFailures
		case failingFor >= c.failing:
			up.Set["disabledReason"] = tally.DisabledFailingTooLong
		}
		if up.Set["disabledReason"] != "" {
			up.Set["status"], up.Set["disabledAt"] = tally.EndpointDisabled, strconv.FormatInt(ms, 10)
		}
	}
	if len(up.Set) == 0 {
		up.Set = nil
	}
	up.Conds = []store.Cond{store.Exists(), store.NumEquals("rev", h.rev)}
	return up, true
}

// outcomesOp is outcomeOp for the outcomes of several attempts recorded
// together, taken in turn: one update. When more than one outcome writes,
// it holds only on the endpoint as read (rev), as the later ones were
// decided on what the earlier ones did.
func (c healthConfig) outcomesOp(it store.Item, oks []bool, now time.Time) (store.Op, bool) {
	rev := healthOf(it).rev
	var merged store.Op
	writes := 0
	for _, ok := range oks {
		op, write := c.outcomeOp(it, ok, now)
		if !write {
			continue
		}
		it = applied(it, op)
		if writes == 0 {
			merged = store.Op{Kind: op.Kind, Key: op.Key, Set: map[string]string{}, Add: map[string]int64{}, Conds: op.Conds}
		}
		maps.Copy(merged.Set, op.Set)
		for k, n := range op.Add {
			merged.Add[k] += n
		}
		writes++
	}
	if writes > 1 {
		merged.Conds = []store.Cond{store.Exists(), store.NumEquals("rev", rev)}
	}
	if len(merged.Set) == 0 {
		merged.Set = nil
	}
	return merged, writes > 0
}

// applied is an endpoint's item after an update of its health.
func applied(it store.Item, op store.Op) store.Item {
	attrs := make(map[string]string, len(it.Attrs)+len(op.Set))
	maps.Copy(attrs, it.Attrs)
	maps.Copy(attrs, op.Set)
	nums := cloneNums(it.Nums)
	for k, n := range op.Add {
		nums[k] += n
	}
	it.Attrs, it.Nums = attrs, nums
	return it
}

// enableEndpoint re-enables the endpoint at key with a fresh start: no
// failures counted. It answers the item as it is afterwards.
func (s *Service) enableEndpoint(ctx context.Context, key store.Key) (store.Item, error) {
	for {
		it, err := s.store.Get(ctx, key)
		if err != nil {
			return store.Item{}, err
		}
		h := healthOf(it)
		up := store.Op{Kind: store.OpUpdate, Key: key,
			Set:   map[string]string{"status": tally.EndpointEnabled, "disabledReason": ""},
			Add:   map[string]int64{"rev": 1, "fails": -h.fails, "failingSince": -h.failingSince},
			Conds: []store.Cond{store.Exists(), store.NumEquals("rev", h.rev)}}
		after, err := s.store.Update(ctx, up)
		if _, changed := store.FailedOp(err); changed {
			continue // an attempt was recorded meanwhile: read again
		}
		if errors.Is(err, store.ErrConflict) {
			if err := records.Sleep(ctx, 5*time.Millisecond); err != nil {
				return store.Item{}, err
			}
			continue
		}
		return after, err
	}
}

// EnableSubscription re-enables a webhook subscription, with its failure
// count back at zero. Enabling an enabled one changes nothing else.
func (s *Service) EnableSubscription(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	if _, err := s.subscription(ctx, brandID, subscriptionID); err != nil {
		return tally.Subscription{}, err
	}
	var rec subscriptionRecord
	err := s.enableAndDecode(ctx, keys.Subscription(brandID, subscriptionID), &rec)
	return rec.Subscription, records.NotFound(err, "webhook subscription", subscriptionID)
}

// EnablePostback re-enables a partner's postback, like EnableSubscription.
func (s *Service) EnablePostback(ctx context.Context, brandID, partnerID string) (tally.Postback, error) {
	if _, err := s.postback(ctx, brandID, partnerID); err != nil {
		return tally.Postback{}, err
	}
	var rec postbackRecord
	err := s.enableAndDecode(ctx, keys.Postback(brandID, partnerID), &rec)
	return rec.Postback, records.NotFound(err, "postback of partner", partnerID)
}

func (s *Service) enableAndDecode(ctx context.Context, key store.Key, v any) error {
	it, err := s.enableEndpoint(ctx, key)
	if err != nil {
		return err
	}
	return records.Decode(it, v)
}

// RecoverInput is the body of the recover actions.
type RecoverInput struct {
	Since *string `json:"since"`
}

// Recovery says what a recover action queued again.
type Recovery struct {
	Since     tally.Time `json:"since"`
	Recovered int        `json:"recovered"` // failed deliveries queued again
	// More is true when there were more failed deliveries than one call
	// recovers: call again with the same since for the rest.
	More bool `json:"more"`
}

// maxRecover bounds the deliveries one recover call queues again, so that it
// answers well within an HTTP request's time.
const maxRecover = 1000

// RecoverSubscription queues again every failed delivery to a subscription
// whose event came at or after since: the same wh_ and evt_ ids, a fresh
// schedule starting now. The subscription must be enabled.
func (s *Service) RecoverSubscription(ctx context.Context, brandID, subscriptionID string, in RecoverInput) (Recovery, error) {
	if _, err := s.subscription(ctx, brandID, subscriptionID); err != nil {
		return Recovery{}, err
	}
	return s.recoverEndpoint(ctx, brandID, subscriptionID, keys.Subscription(brandID, subscriptionID), in)
}

// RecoverPostback is RecoverSubscription for a partner's postback.
func (s *Service) RecoverPostback(ctx context.Context, brandID, partnerID string, in RecoverInput) (Recovery, error) {
	if _, err := s.postback(ctx, brandID, partnerID); err != nil {
		return Recovery{}, err
	}
	return s.recoverEndpoint(ctx, brandID, partnerID, keys.Postback(brandID, partnerID), in)
}

func (s *Service) recoverEndpoint(ctx context.Context, brandID, endpointID string, key store.Key, in RecoverInput) (Recovery, error) {
	if in.Since == nil {
		return Recovery{}, validate.Invalid("since is required: an RFC 3339 time; failed deliveries of events since then are sent again.")
	}
	since, err := time.Parse(time.RFC3339Nano, *in.Since)
	if err != nil {
		return Recovery{}, validate.Invalid("since must be an RFC 3339 time such as 2026-11-22T10:00:00Z.")
	}
	now := s.Now()
	if since.Truncate(time.Millisecond).After(now) {
		return Recovery{}, validate.Invalid("since is in the future.")
	}
	it, err := s.store.Get(ctx, key)
	if err != nil {
		return Recovery{}, err
	}
	if healthOf(it).status == tally.EndpointDisabled {
		return Recovery{}, tally.Errorf(tally.ECodeInvalidTransition, "The endpoint is disabled; enable it before recovering its deliveries.")
	}
	out := Recovery{Since: tally.NewTime(since)}
	sp := records.Span{From: ids.Floor("wh_", since), Filter: "recover"}
	for shard := range keys.Shards {
		sp.Parts = append(sp.Parts, records.Partition{Index: store.GSI2, PK: keys.DeliveriesByEndpoint(brandID, endpointID, shard)})
	}
	failed := func(d *deliveryRecord) bool { return d.Status == tally.DeliveryFailed }
	p := ListParams{Limit: MaxLimit}
	for {
		recs, next, err := records.ListSpan(ctx, s.db, sp, p, failed)
		if err != nil {
			return out, err
		}
		for _, rec := range recs {
			if out.Recovered == maxRecover {
				out.More = true
				return out, nil
			}
			_, err := s.restart(ctx, rec)
			if _, changed := store.FailedOp(err); changed {
				continue // retried or recovered meanwhile
			}
			if err != nil {
				return out, err
			}
			out.Recovered++
		}
		if p.Cursor = next; next == "" {
			return out, nil
		}
	}
}
