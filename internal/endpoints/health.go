// Package endpoints keeps the endpoints Tally delivers to: brands' webhook
// subscriptions and partners' postbacks, with their health (an endpoint
// that keeps failing is disabled), and makes their test events. The
// webhook engine (package webhooks) delivers to them.
package endpoints

import (
	"context"
	"errors"
	"maps"
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/secretbox"
	"github.com/tally-hq/tally/internal/store"
)

// Service keeps the endpoints.
type Service struct {
	db       *records.DB
	events   *outbox.Writer
	partners partnerReader
	// checkURL vets receiver URLs (package ssrf).
	checkURL func(string) error
	// secrets seals the subscriptions' signing secrets.
	secrets *secretbox.Box
}

// partnerReader reads the partner whose postback is set.
type partnerReader interface {
	Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error)
}

// New returns the Service over db, writing through events, whose
// receiver URLs checkURL vets and signing secrets secrets seals (nil: the
// service sets no secret, and fails a change that would).
func New(db *records.DB, events *outbox.Writer, p partnerReader, checkURL func(string) error, secrets *secretbox.Box) *Service {
	return &Service{db: db, events: events, partners: p, checkURL: checkURL, secrets: secrets}
}

// Endpoint health: every recorded attempt updates the endpoint it went to (a
// webhook subscription or a partner's postback) in the same transaction as
// the attempt, so the counters are exact whatever repeats or crashes. The
// counters are top-level attributes of the endpoint's item (the record in
// its Data stays as configured):
//
//	status          "enabled" | "disabled"  (attr)
//	disabledReason  why it was disabled     (attr)
//	disabledAt      unix ms it was disabled (attr)
//	statusChangedAt unix ms health last disabled or enabled it (attr)
//	lastSuccessAt   unix ms of the last success (attr)
//	fails           consecutive failed attempts (num): the circuit breaker's
//	failed          consecutive deliveries that failed every attempt (num):
//	                what disables the endpoint, shown as consecutiveFailures
//	failingSince    unix ms of the first failure after the last success, 0 if none (num)
//	rev             changes with every write of the item (num)
//
// Writes that decide something (the first failure, the one that disables,
// a success that resets the counters, enable, PATCH) are conditioned on
// rev, so they apply to exactly the state they read and are retried on a
// fresh read otherwise; a failure that changes nothing but the count is a
// plain atomic add conditioned on the count staying under the threshold.
// A failed attempt that the delivery retries counts for the circuit
// breaker and starts the failing clock, but only a delivery that failed
// every attempt counts toward disabling: a burst of deliveries during a
// short outage would otherwise disable an endpoint that recovers soon
// after.
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

// Health is the health kept in an endpoint item's attributes.
type Health struct {
	Status, Reason string
	DisabledAt     int64 // unix ms
	StatusChanged  int64 // unix ms, 0 = never
	LastOK         int64 // unix ms, 0 = never
	Fails          int64 // consecutive failed attempts
	Failed         int64 // consecutive deliveries that failed every attempt
	FailingSince   int64 // unix ms, 0 = not failing
	Rev            int64
}

func HealthOf(it store.Item) Health {
	h := Health{
		Status: it.Attrs["status"], Reason: it.Attrs["disabledReason"],
		Fails: it.Nums["fails"], Failed: it.Nums["failed"], FailingSince: it.Nums["failingSince"], Rev: it.Nums["rev"],
	}
	h.LastOK, _ = strconv.ParseInt(it.Attrs["lastSuccessAt"], 10, 64)
	h.DisabledAt, _ = strconv.ParseInt(it.Attrs["disabledAt"], 10, 64)
	h.StatusChanged, _ = strconv.ParseInt(it.Attrs["statusChangedAt"], 10, 64)
	if h.Status == "" {
		h.Status = tally.EndpointEnabled
	}
	return h
}

// Public is the health as the API shows it.
func (h Health) Public() tally.EndpointHealth {
	out := tally.EndpointHealth{Status: h.Status, DisabledReason: h.Reason, ConsecutiveFailures: h.Failed}
	if h.Status == tally.EndpointDisabled {
		out.DisabledAt = ptrTo(tally.NewTime(time.UnixMilli(h.DisabledAt)))
	} else {
		out.DisabledReason = ""
	}
	if h.LastOK != 0 {
		out.LastSuccessAt = ptrTo(tally.NewTime(time.UnixMilli(h.LastOK)))
	}
	if h.FailingSince != 0 {
		out.FailingSince = ptrTo(tally.NewTime(time.UnixMilli(h.FailingSince)))
	}
	return out
}

// UpdatedAt is when the endpoint last changed: its record's updatedAt, or
// later when health disabled or enabled it since, which leaves the record
// as configured.
func (h Health) UpdatedAt(recordUpdatedAt tally.Time) tally.Time {
	if h.StatusChanged > recordUpdatedAt.UnixMilli() {
		return tally.NewTime(time.UnixMilli(h.StatusChanged))
	}
	return recordUpdatedAt
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

// HealthConfig is when an endpoint is disabled.
type HealthConfig struct {
	Failures int64         // consecutive deliveries that failed every attempt
	Failing  time.Duration // failing with no success for this long
}

// Outcome is what a recorded attempt tells about its endpoint.
type Outcome int

const (
	Succeeded Outcome = iota // the attempt succeeded
	Retrying                 // it failed, and the delivery tries again
	Failed                   // it failed, and so did the delivery, every attempt
)

// OutcomeOp is the update that records an attempt's outcome on the endpoint
// whose item was read as it, or false when nothing needs writing (a healthy
// endpoint whose lastSuccessAt is fresh).
func (c HealthConfig) OutcomeOp(it store.Item, out Outcome, now time.Time) (store.Op, bool) {
	h := HealthOf(it)
	ms := now.UnixMilli()
	up := store.Op{Kind: store.OpUpdate, Key: it.Key, Set: map[string]string{}, Add: map[string]int64{"rev": 1}}
	if out == Succeeded {
		if h.Fails == 0 && h.Failed == 0 && h.FailingSince == 0 {
			if ms-h.LastOK < lastSuccessRefresh.Milliseconds() {
				return store.Op{}, false
			}
			// Only a timestamp moves: no need to hold the rest still.
			up.Set["lastSuccessAt"] = strconv.FormatInt(ms, 10)
			up.Conds = []store.Cond{store.Exists()}
			return up, true
		}
		up.Set["lastSuccessAt"] = strconv.FormatInt(ms, 10)
		up.Add["fails"], up.Add["failed"], up.Add["failingSince"] = -h.Fails, -h.Failed, -h.FailingSince
		up.Conds = []store.Cond{store.Exists(), store.NumEquals("rev", h.Rev)}
		return up, true
	}
	up.Add["fails"] = 1
	failed := h.Failed
	if out == Failed {
		up.Add["failed"] = 1
		failed++
	}
	failingFor := time.Duration(0)
	if h.FailingSince != 0 {
		failingFor = time.Duration(ms-h.FailingSince) * time.Millisecond
	}
	if h.FailingSince != 0 && (h.Status == tally.EndpointDisabled || failed < c.Failures && failingFor < c.Failing) {
		// Only the counts move, and they stay under the threshold: an
		// atomic add, which concurrent failures need not take turns for.
		up.Conds = []store.Cond{store.Exists(), store.NumEquals("failingSince", h.FailingSince)}
		if h.Status != tally.EndpointDisabled && out == Failed {
			up.Conds = append(up.Conds, store.NumLess("failed", c.Failures-1))
		}
		return up, true
	}
	if h.FailingSince == 0 {
		up.Add["failingSince"] = ms
		failingFor = 0
	}
	if h.Status != tally.EndpointDisabled {
		switch {
		case failed >= c.Failures:
			up.Set["disabledReason"] = tally.DisabledConsecutiveFailures
		case failingFor >= c.Failing:
			up.Set["disabledReason"] = tally.DisabledFailingTooLong
		}
		if up.Set["disabledReason"] != "" {
			up.Set["status"], up.Set["disabledAt"], up.Set["statusChangedAt"] = tally.EndpointDisabled, strconv.FormatInt(ms, 10), strconv.FormatInt(ms, 10)
		}
	}
	if len(up.Set) == 0 {
		up.Set = nil
	}
	up.Conds = []store.Cond{store.Exists(), store.NumEquals("rev", h.Rev)}
	return up, true
}

// GoneOp is the update that records a 410 Gone on the endpoint whose item
// was read as it: a failed attempt that disables it at once
// (disabledReason "gone"), unless it is disabled already.
func (c HealthConfig) GoneOp(it store.Item, now time.Time) store.Op {
	up, _ := c.OutcomeOp(it, Failed, now)
	if HealthOf(it).Status == tally.EndpointDisabled {
		return up
	}
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	if up.Set == nil {
		up.Set = map[string]string{}
	}
	up.Set["status"], up.Set["disabledReason"], up.Set["disabledAt"], up.Set["statusChangedAt"] = tally.EndpointDisabled, tally.DisabledGone, ms, ms
	up.Conds = []store.Cond{store.Exists(), store.NumEquals("rev", HealthOf(it).Rev)}
	return up
}

// OutcomesOp is OutcomeOp for the outcomes of several attempts recorded
// together, taken in turn: one update. When more than one outcome writes,
// it holds only on the endpoint as read (rev), as the later ones were
// decided on what the earlier ones did.
func (c HealthConfig) OutcomesOp(it store.Item, outs []Outcome, now time.Time) (store.Op, bool) {
	rev := HealthOf(it).Rev
	var merged store.Op
	writes := 0
	for _, out := range outs {
		op, write := c.OutcomeOp(it, out, now)
		if !write {
			continue
		}
		it = Applied(it, op)
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

// Applied is an endpoint's item after an update of its health.
func Applied(it store.Item, op store.Op) store.Item {
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
func (s *Service) enableEndpoint(ctx context.Context, key store.Key, entry enabledEntry) (store.Item, error) {
	for {
		it, err := s.db.Get(ctx, key)
		if err != nil {
			return store.Item{}, err
		}
		h := HealthOf(it)
		up := store.Op{Kind: store.OpUpdate, Key: key,
			Set:   map[string]string{"status": tally.EndpointEnabled, "disabledReason": ""},
			Add:   map[string]int64{"rev": 1, "fails": -h.Fails, "failed": -h.Failed, "failingSince": -h.FailingSince},
			Conds: []store.Cond{store.Exists(), store.NumEquals("rev", h.Rev)}}
		var logged []store.Op
		if h.Status == tally.EndpointDisabled {
			now := s.db.Now()
			up.Set["statusChangedAt"] = strconv.FormatInt(now.UnixMilli(), 10)
			logged = audit.Record(ctx, entry.brandID, entry.action, entry.targetID, endpointURL(it), now)
		}
		after, err := s.updateLogged(ctx, up, logged)
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

// enabledEntry is the audit log's entry for an endpoint enabled again;
// its text is the endpoint's URL (endpointURL).
type enabledEntry struct {
	brandID, action, targetID string
}

// updateLogged applies up, with the audit log's entry when there is one
// (in one transaction), and answers the item as it is afterwards.
func (s *Service) updateLogged(ctx context.Context, up store.Op, logged []store.Op) (store.Item, error) {
	if len(logged) == 0 {
		return s.db.Update(ctx, up)
	}
	if err := s.db.Transact(ctx, append([]store.Op{up}, logged...)...); err != nil {
		return store.Item{}, err
	}
	return s.db.Get(ctx, up.Key)
}

// endpointURL is the summary of an enabled endpoint: its URL.
func endpointURL(it store.Item) string {
	var e struct {
		URL string `json:"url"`
	}
	_ = records.Decode(it, &e) // a summary without the URL is still an entry
	return e.URL
}

// EnableSubscription re-enables a webhook subscription, with its failure
// count back at zero. Enabling an enabled one changes nothing else.
func (s *Service) EnableSubscription(ctx context.Context, brandID, subscriptionID string) (tally.Subscription, error) {
	if _, err := s.SubscriptionRecord(ctx, brandID, subscriptionID); err != nil {
		return tally.Subscription{}, err
	}
	var rec SubscriptionRecord
	err := s.enableAndDecode(ctx, keys.Subscription(brandID, subscriptionID), &rec, enabledEntry{brandID, audit.WebhookEnabled, subscriptionID})
	return rec.Subscription, records.NotFound(err, "webhook subscription", subscriptionID)
}

// EnablePostback re-enables a partner's postback, like EnableSubscription.
func (s *Service) EnablePostback(ctx context.Context, brandID, partnerID string) (tally.Postback, error) {
	if _, err := s.PostbackRecord(ctx, brandID, partnerID); err != nil {
		return tally.Postback{}, err
	}
	var rec PostbackRecord
	err := s.enableAndDecode(ctx, keys.Postback(brandID, partnerID), &rec, enabledEntry{brandID, audit.PostbackEnabled, partnerID})
	return rec.Postback, records.NotFound(err, "postback of partner", partnerID)
}

func (s *Service) enableAndDecode(ctx context.Context, key store.Key, v any, entry enabledEntry) error {
	it, err := s.enableEndpoint(ctx, key, entry)
	if err != nil {
		return err
	}
	return records.Decode(it, v)
}

func ptrTo[T any](v T) *T { return &v }
