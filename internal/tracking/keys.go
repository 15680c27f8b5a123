package tracking

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// This file is the whole single-table key design; docs/data-model.md explains
// it. Nothing outside it builds a key.

// shards spreads a brand's high-volume items (conversions, their index
// entries, rollups, events, the hold queue) over several partitions so that
// a brand posting 1,000 conversions a second stays under DynamoDB's
// per-partition write limit. Changing it orphans existing items.
const shards = 4

// shardOf places an identifier in a shard, stably.
func shardOf(id string) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % shards)
}

// Brand partition: the brand record and its low-volume children (offers,
// partners, partner e-mail markers), so that a key built from the caller's
// brand can never reach another brand's item.
func brandPK(brandID string) string     { return "BRD#" + brandID }
func brandKey(brandID string) store.Key { return store.Key{PK: brandPK(brandID), SK: "#BRAND"} }

func offerKey(brandID, offerID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "OFF#" + offerID}
}

const offerSKPrefix = "OFF#"

func partnerKey(brandID, partnerID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "PRT#" + partnerID}
}

const partnerSKPrefix = "PRT#"

// partnerEmailKey makes one application per e-mail address and brand.
func partnerEmailKey(brandID, email string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "PEMAIL#" + email}
}

// API keys are found by the hash of their secret (authentication), by brand
// (listing, GSI1) and by id (revocation, GSI2).
func apiKeyKey(secretHash string) store.Key {
	return store.Key{PK: "KEY#" + secretHash, SK: "#KEY"}
}
func apiKeysByBrand(brandID string) string { return "BRD#" + brandID + "#KEY" }
func apiKeyByID(keyID string) string       { return "KEYID#" + keyID }

// Conversions live in the brand's conversion shards, sorted by id (and so by
// time). GSI1 lists them per offer, GSI2 per partner, each sharded the same
// way; GSI3 holds pending conversions with a hold time, by due time, across
// brands (sparse: approval or rejection takes them out).
func conversionPK(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#CNV#%d", brandID, shard)
}
func conversionKey(brandID, conversionID string) store.Key {
	return store.Key{PK: conversionPK(brandID, shardOf(conversionID)), SK: conversionID}
}
func conversionsByOffer(brandID, offerID string, shard int) string {
	return fmt.Sprintf("BRD#%s#OFF#%s#CNV#%d", brandID, offerID, shard)
}
func conversionsByPartner(brandID, partnerID string, shard int) string {
	return fmt.Sprintf("BRD#%s#PRT#%s#CNV#%d", brandID, partnerID, shard)
}
func holdQueuePK(shard int) string { return "HOLD#" + strconv.Itoa(shard) }

// holdQueueSK sorts by due time; the conversion id keeps entries unique.
func holdQueueSK(due time.Time, conversionID string) string {
	return fmt.Sprintf("%013d#%s", due.UnixMilli(), conversionID)
}

// holdQueueUpTo is the inclusive upper bound of entries due at or before t.
func holdQueueUpTo(t time.Time) string { return fmt.Sprintf("%013d$", t.UnixMilli()) }

// txnKey marks an (offer, externalTxnId) pair as recorded; its Data holds
// the conversion id, so a replay finds the first conversion.
func txnKey(brandID, offerID, externalTxnID string) store.Key {
	return store.Key{PK: "TXN#" + brandID + "#" + offerID + "#" + externalTxnID, SK: "#TXN"}
}

// capKey counts an offer's conversions in one cap period.
func capKey(offerID, period string) store.Key {
	return store.Key{PK: "CAP#" + offerID, SK: period}
}

// Rollups: one item per (day, offer, partner, currency) and shard, with the
// report metrics as counters. A report range-queries each shard by day.
func rollupPK(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#RU#%d", brandID, shard)
}
func rollupKey(brandID string, shard int, day, offerID, partnerID, currency string) store.Key {
	return store.Key{PK: rollupPK(brandID, shard), SK: day + "#" + offerID + "#" + partnerID + "#" + currency}
}

// rollupDayTo is the inclusive upper bound of a day's rollup sort keys.
func rollupDayTo(day string) string { return day + "$" }

// Events are the outbox: one item each, found by id (the stream and the
// delivery pipeline), per brand (GSI1, sharded) and, until their deliveries
// exist, in the outbox (GSI3, sharded) that the local pipeline drains.
func eventKey(eventID string) store.Key { return store.Key{PK: "EVT#" + eventID, SK: "#EVT"} }
func eventsByBrand(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#EVT#%d", brandID, shard)
}
func outboxPK(shard int) string { return "OUTBOX#" + strconv.Itoa(shard) }

// Webhook subscriptions live in the brand partition.
func subscriptionKey(brandID, subscriptionID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "SUB#" + subscriptionID}
}

const subscriptionSKPrefix = "SUB#"

// subscriptionCountKey counts a brand's subscriptions, so the limit holds
// under concurrent creation.
func subscriptionCountKey(brandID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "#SUBCOUNT"}
}

// Deliveries live in the brand's delivery shards, sorted by id; GSI2 lists
// them per subscription; while pending, GSI3 holds them by due time across
// brands (the local pipeline's queue).
func deliveryPK(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#WH#%d", brandID, shard)
}
func deliveryKey(brandID, deliveryID string) store.Key {
	return store.Key{PK: deliveryPK(brandID, shardOf(deliveryID)), SK: deliveryID}
}
func deliveriesBySubscription(brandID, subscriptionID string, shard int) string {
	return fmt.Sprintf("BRD#%s#SUB#%s#WH#%d", brandID, subscriptionID, shard)
}
func dueQueuePK(shard int) string { return "DUE#" + strconv.Itoa(shard) }

// dueQueueSK sorts by due time, like the hold queue.
func dueQueueSK(due time.Time, deliveryID string) string { return holdQueueSK(due, deliveryID) }

// rateKey counts one bucket's requests in one window.
func rateKey(bucket string, window int64) store.Key {
	return store.Key{PK: "RATE#" + bucket, SK: strconv.FormatInt(window, 10)}
}
