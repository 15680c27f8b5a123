package endpoints

import (
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// DeliveryRecord is the stored delivery: what the log shows, plus what an
// attempt needs without further reads.
type DeliveryRecord struct {
	tally.Delivery
	// CycleStart is how many attempts came before the current schedule (a
	// manual retry starts a new one).
	CycleStart int `json:"cycleStart,omitempty"`
	// Parked: waiting for its endpoint's circuit (internal/webhooks/breaker.go).
	Parked bool `json:"parked,omitempty"`
	// Trace is the span its event kept (trace.Attr): each attempt sends a
	// new span of that trace. Empty: none is sent.
	Trace string `json:"trace,omitempty"`
	// Conversion names the conversion whose conversion.created the
	// delivery sends when that event is not stored: its envelope is made
	// from the conversion (conversions.CreatedEvent), the same at every
	// attempt. Empty: the envelope is the stored event's.
	Conversion string `json:"conversion,omitempty"`
	// Unsaved: planned by webhooks.Engine.Dispatch and not written yet; its first write
	// is conditioned on the delivery being absent.
	Unsaved bool `json:"-"`
	// packed holds the attempts' answers as read from the store, so that a
	// write keeps them as they are; an answer compressed against a
	// dictionary is empty in Attempts until Answers.Show reads it.
	packed []packedAnswer
}

// AsRead is the condition that the delivery is stored as rec was read: as
// many attempts, or absent while it is unsaved.
func (rec DeliveryRecord) AsRead() store.Cond {
	if rec.Unsaved {
		return store.NotExists()
	}
	return store.AttrEquals("attempts", strconv.Itoa(len(rec.Attempts)))
}

// DeliveryRef names a delivery for the transports (queue messages, state
// machine input).
type DeliveryRef struct {
	BrandID    string `json:"brandId"`
	DeliveryID string `json:"deliveryId"`
}

// DeliveryItem is the stored delivery; it expires keep after its last
// change (the table's TTL takes it and its attempts). The answers read with
// it stay as they are stored; the others are compressed without a
// dictionary (Answers.Item compresses them against one).
func DeliveryItem(rec DeliveryRecord, keep time.Duration) store.Item {
	packed := make([]packedAnswer, len(rec.Attempts))
	for i, a := range rec.Attempts {
		if i < len(rec.packed) {
			packed[i] = rec.packed[i]
		} else {
			packed[i] = packNoDictionary(a.Response)
		}
	}
	return deliveryItem(rec, keep, packed)
}

// deliveryItem is DeliveryItem with the attempts' answers packed.
func deliveryItem(rec DeliveryRecord, keep time.Duration, packed []packedAnswer) store.Item {
	shard := keys.ShardOf(rec.ID)
	it := store.Item{
		Key:       keys.Delivery(rec.BrandID, rec.ID),
		GSI2:      store.IndexKey{PK: keys.DeliveriesByEndpoint(rec.BrandID, rec.EndpointID(), shard), SK: rec.ID},
		Attrs:     map[string]string{"status": rec.Status, "attempts": strconv.Itoa(len(rec.Attempts))},
		ExpiresAt: rec.UpdatedAt.Add(keep).Unix(),
	}
	// The receivers' answers (up to 4 KiB an attempt) go in an attribute of
	// their own, which gsi1 and gsi2 leave out (store.IndexAttrs): written
	// once, not once per index entry.
	if len(rec.Attempts) > 0 {
		rec.Attempts = append([]tally.Attempt(nil), rec.Attempts...) // the caller's stay as they are
	}
	some := false
	for i := range rec.Attempts {
		rec.Attempts[i].Response = ""
		some = some || len(packed[i].bytes) > 0
	}
	if some {
		it.Bins = map[string][]byte{responsesAttr: appendAnswers(nil, packed)}
	}
	it.Data = records.MustJSON(rec)
	// GSI1 holds the deliveries that are not succeeded, for the log's
	// pending and failed filters: most deliveries succeed, and the log
	// lists those from the table (Log.Deliveries). A delivery that
	// succeeds loses its entry; one retried gets it back.
	if rec.Status != tally.DeliverySucceeded {
		it.GSI1 = store.IndexKey{PK: keys.DeliveriesByTypeStatus(rec.BrandID, rec.Type, rec.Status, shard), SK: rec.ID}
	}
	switch {
	case rec.Status != tally.DeliveryPending:
	case rec.Parked:
		it.GSI3 = store.IndexKey{PK: keys.ParkedPK(rec.BrandID, rec.EndpointID(), keys.QueueShardOf(rec.ID)), SK: rec.ID}
	case rec.NextAttemptAt != nil:
		it.GSI3 = store.IndexKey{PK: keys.DueQueuePK(keys.QueueShardOf(rec.ID)), SK: keys.DueQueueSK(rec.NextAttemptAt.Time, rec.ID)}
	}
	return it
}

// responsesAttr holds a delivery's receiver answers, one per attempt.
const responsesAttr = "responses"

// FromItem puts the receivers' answers back in the attempts, but for those
// compressed against a dictionary (Answers.Show reads them). Items written
// before answers had an attribute of their own keep them in Data.
func (rec *DeliveryRecord) FromItem(it store.Item) {
	packed, texts, err := answersOf(it)
	if err != nil {
		return
	}
	if len(packed) == len(rec.Attempts) {
		rec.packed = packed
	}
	for i := range min(len(texts), len(rec.Attempts)) {
		rec.Attempts[i].Response = texts[i]
	}
}

// ReadWhole says that gsi1 and gsi2 hold a delivery without its answers:
// a list read from them reads each delivery it keeps from the table.
func (*DeliveryRecord) ReadWhole() {}

// EndpointID is the subscription's id for a webhook, the partner's for a
// postback.
func (rec DeliveryRecord) EndpointID() string {
	if rec.Type == tally.DeliveryPostback {
		return rec.PartnerID
	}
	return rec.SubscriptionID
}

func (rec DeliveryRecord) EndpointName() string {
	if rec.Type == tally.DeliveryPostback {
		return "postback of partner " + rec.PartnerID
	}
	return "subscription " + rec.SubscriptionID
}

func (rec DeliveryRecord) EndpointKey() store.Key {
	if rec.Type == tally.DeliveryPostback {
		return keys.Postback(rec.BrandID, rec.PartnerID)
	}
	return keys.Subscription(rec.BrandID, rec.SubscriptionID)
}

func (rec DeliveryRecord) Ref() DeliveryRef {
	return DeliveryRef{BrandID: rec.BrandID, DeliveryID: rec.ID}
}

// Brand is the brand the delivery belongs to (the queue's message group).
func (r DeliveryRef) Brand() string { return r.BrandID }
