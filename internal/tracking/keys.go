package tracking

import (
	"fmt"
	"strconv"
	"time"

	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/store"
)

// This file is the whole single-table key design; docs/data-model.md explains
// it. Nothing outside it builds a key. The keys every click and conversion
// writes are concatenated rather than formatted: fmt was a measurable part
// of a click's CPU.

// shards spreads a brand's high-volume items (conversions, their index
// entries, rollups, events, the hold queue) over several partitions so that
// a brand posting 1,000 conversions a second stays under DynamoDB's
// per-partition write limit. Changing it orphans existing items. (The
// queues across brands have queueShards.)
const shards = 4

// shardOf places an identifier in a shard, stably.
func shardOf(id string) int { return int(hash(id) % shards) }

// newID makes the identifier of a new click, conversion or event. On a
// store without partitions (the embedded one) it draws until the
// identifier is in shard 0: there the shards spread nothing, and a commit
// round's items, index and queue entries then land in one shard's pages
// rather than four (docs/performance.md). Readers read every shard, so items
// made before stay found.
func (s *Service) newID(prefix string, t time.Time) string {
	var buf [32]byte // the longest prefix and a ULID
	for {
		id := ids.Append(buf[:0], prefix, t)
		if s.partitioned || hash(id)%shards == 0 {
			return string(id)
		}
	}
}

// queueShards spreads the queues that every brand's work passes through
// (gsi3: the outbox, the due, hold and wait queues) over enough partitions
// for the table to carry 10,000 conversions a second: each item enters and
// leaves its queue (2 index writes), 20,000 writes a second per queue,
// 625 per partition key, under DynamoDB's 1,000 (docs/aws.md, "Scale").
// The readers read every shard, so raising it orphans nothing; lowering
// it would.
const queueShards = 32

// queueShardOf places an identifier in a queue shard, stably.
func queueShardOf(id string) int { return int(hash(id) % queueShards) }

// hash is 32-bit FNV-1a, written out so that hashing a string or a buffer
// allocates nothing.
func hash[T string | []byte](id T) uint32 {
	h := uint32(2166136261)
	for i := range len(id) {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return h
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

// offerRefKey finds an offer's brand from the offer id alone, for the
// tracking link, which names only the offer. Its Data holds the brand id.
func offerRefKey(offerID string) store.Key { return store.Key{PK: "OFF#" + offerID, SK: "#OFF"} }

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

// Dashboard users are found by e-mail address (sign-in), which is unique
// across brands, and listed per brand (GSI1). Sessions are found by the
// hash of their token.
func userKey(email string) store.Key        { return store.Key{PK: "USER#" + email, SK: "#USER"} }
func usersByBrand(brandID string) string    { return "BRD#" + brandID + "#USR" }
func sessionKey(tokenHash string) store.Key { return store.Key{PK: "SESS#" + tokenHash, SK: "#SESS"} }

// A brand's postback token is found by the hash of its secret (the
// postback) and from the brand (showing, rotating and deleting it).
func postbackTokenKey(secretHash string) store.Key {
	return store.Key{PK: "PBT#" + secretHash, SK: "#PBT"}
}
func brandPostbackTokenKey(brandID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "#PBTOKEN"}
}

// Conversions live in the brand's conversion shards, sorted by id (and so by
// time). GSI1 lists them per offer, GSI2 per partner, each sharded the same
// way; GSI3 holds pending conversions with a hold time, by due time, across
// brands (sparse: approval or rejection takes them out).
func conversionPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#CNV#" + strconv.Itoa(shard)
}
func conversionKey(brandID, conversionID string) store.Key {
	return store.Key{PK: conversionPK(brandID, shardOf(conversionID)), SK: conversionID}
}
func conversionsByOffer(brandID, offerID string, shard int) string {
	return "BRD#" + brandID + "#OFF#" + offerID + "#CNV#" + strconv.Itoa(shard)
}
func conversionsByPartner(brandID, partnerID string, shard int) string {
	return "BRD#" + brandID + "#PRT#" + partnerID + "#CNV#" + strconv.Itoa(shard)
}
func holdQueuePK(shard int) string { return "HOLD#" + strconv.Itoa(shard) }

// holdQueueSK sorts by due time; the conversion id keeps entries unique.
func holdQueueSK(due time.Time, conversionID string) string {
	return fmt.Sprintf("%013d#%s", due.UnixMilli(), conversionID)
}

// holdQueueUpTo is the inclusive upper bound of entries due at or before t.
func holdQueueUpTo(t time.Time) string { return fmt.Sprintf("%013d$", t.UnixMilli()) }

// txnKey marks an (offer, externalTxnId) pair as recorded; its Data holds
// the conversion id, or the whole conversion when it was written apart
// (putConversion), so a replay finds the first conversion.
func txnKey(brandID, offerID, externalTxnID string) store.Key {
	return store.Key{PK: "TXN#" + brandID + "#" + offerID + "#" + externalTxnID, SK: "#TXN"}
}

// capKey counts an offer's conversions in one cap period.
func capKey(offerID, period string) store.Key {
	return store.Key{PK: "CAP#" + offerID, SK: period}
}

// Clicks live in the brand's click shards, sorted by id, and are listed per
// offer (GSI1) and per partner (GSI2) like conversions.
func clickPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#CLK#" + strconv.Itoa(shard)
}
func clickKey(brandID, clickID string) store.Key {
	return store.Key{PK: clickPK(brandID, shardOf(clickID)), SK: clickID}
}
func clicksByOffer(brandID, offerID string, shard int) string {
	return "BRD#" + brandID + "#OFF#" + offerID + "#CLK#" + strconv.Itoa(shard)
}
func clicksByPartner(brandID, partnerID string, shard int) string {
	return "BRD#" + brandID + "#PRT#" + partnerID + "#CLK#" + strconv.Itoa(shard)
}

// The brand's fraud settings and blocked address ranges live in the brand
// partition; a marker per range keeps each range listed once, a counter
// bounds how many there are.
func fraudSettingsKey(brandID string) store.Key { return store.Key{PK: brandPK(brandID), SK: "#FRAUD"} }
func blockedIPKey(brandID, id string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: blockedIPSKPrefix + id}
}

const blockedIPSKPrefix = "BIP#"

func blockedCIDRKey(brandID, cidr string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "BIPCIDR#" + cidr}
}
func blockedIPCountKey(brandID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "#BIPCOUNT"}
}

// velocityKey counts one address's clicks on one offer in one minute.
func velocityKey(offerID, ip string, minute int64) store.Key {
	return store.Key{PK: "VEL#" + offerID + "#" + ip, SK: strconv.FormatInt(minute, 10)}
}

// highRiskKey counts a partner's high-risk clicks per UTC hour
// (2026112210), for the auto-ban rule's window.
func highRiskPK(brandID, partnerID string) string { return "HRC#" + brandID + "#" + partnerID }
func highRiskKey(brandID, partnerID string, t time.Time) store.Key {
	return store.Key{PK: highRiskPK(brandID, partnerID), SK: highRiskHour(t)}
}
func highRiskHour(t time.Time) string { return t.UTC().Format("2006010215") }

// Rollups: one item per (day, offer, partner, currency) and shard, with the
// report metrics as counters. A report range-queries each shard by day.
func rollupPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#RU#" + strconv.Itoa(shard)
}
func rollupKey(brandID string, shard int, day, offerID, partnerID, currency string) store.Key {
	return store.Key{PK: rollupPK(brandID, shard), SK: day + "#" + offerID + "#" + partnerID + "#" + currency}
}

// rollupDayTo is the inclusive upper bound of a day's rollup sort keys.
func rollupDayTo(day string) string { return day + "$" }

// Quarter-hour rollups hold the same counters per UTC quarter hour
// ("2026-11-22T10:15"), so that a report can cut days at midnight in any
// time zone: every zone's offset from UTC is a whole number of quarter
// hours. The daily rollups serve what lies in whole UTC days.
func rollupQuarterPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#RQ#" + strconv.Itoa(shard)
}
func rollupQuarterKey(brandID string, shard int, quarter, offerID, partnerID, currency string) store.Key {
	return store.Key{PK: rollupQuarterPK(brandID, shard), SK: quarter + "#" + offerID + "#" + partnerID + "#" + currency}
}

// rollupQuartersFrom and rollupQuartersTo bound the quarter-hour rollup
// sort keys of the days from and to, inclusive.
func rollupQuartersFrom(day string) string { return day + "T" }
func rollupQuartersTo(day string) string   { return day + "T~" }

// rollupCheckpointKey holds the last stream record of a shard whose
// conversions were added to the rollups (RollUp). The shard is named by
// its stream's ARN and its id: a stream recreated has new shards.
func rollupCheckpointKey(shard string) store.Key {
	return store.Key{PK: "RUCP#" + shard, SK: "#RUCP"}
}

// Events are the outbox: one item each, found by id (the stream and the
// delivery pipeline), per brand (GSI1, sharded) and, until their deliveries
// exist, in the outbox (GSI3, sharded) that the local pipeline drains.
func eventKey(eventID string) store.Key { return store.Key{PK: "EVT#" + eventID, SK: "#EVT"} }
func eventsByBrand(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#EVT#%d", brandID, shard)
}
func outboxPK(shard int) string { return "OUTBOX#" + strconv.Itoa(shard) }

// With WithStreamConversions a new conversion's event is made from the
// stream, and the conversion's outbox entry is an item of its own, in no
// index: written before the conversion, deleted once its event's
// deliveries are written; sorted by conversion id, so by time.
func conversionOutboxPK(shard int) string { return "OBX#" + strconv.Itoa(shard) }
func conversionOutboxKey(conversionID string) store.Key {
	return store.Key{PK: conversionOutboxPK(queueShardOf(conversionID)), SK: conversionID}
}

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

// A partner's postback lives in the brand partition next to the partner.
func postbackKey(brandID, partnerID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: postbackSKPrefix + partnerID}
}

const postbackSKPrefix = "PB#"

// endpointsKey counts the endpoints (subscriptions and postbacks) ever
// created for a brand, from when it was first written (endpointless.go).
func endpointsKey(brandID string) store.Key {
	return store.Key{PK: brandPK(brandID), SK: "#ENDPOINTS"}
}

// Deliveries live in the brand's delivery shards, sorted by id (ids sort by
// the event's time, so a time span and an event id are sort-key ranges).
// GSI1 lists them per type and status (what the delivery log is filtered by
// most), GSI2 per endpoint (a subscription or a partner's postback); while
// pending, GSI3 holds them by due time across brands (the local pipeline's
// queue). Each index is sharded like the table.
func deliveryPK(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#WH#%d", brandID, shard)
}
func deliveryKey(brandID, deliveryID string) store.Key {
	return store.Key{PK: deliveryPK(brandID, shardOf(deliveryID)), SK: deliveryID}
}
func deliveriesByTypeStatus(brandID, typ, status string, shard int) string {
	return fmt.Sprintf("BRD#%s#WHT#%s#%s#%d", brandID, typ, status, shard)
}

// deliveriesByEndpoint takes a subscription id or a partner id (the prefix
// tells them apart).
func deliveriesByEndpoint(brandID, endpointID string, shard int) string {
	return fmt.Sprintf("BRD#%s#EP#%s#WH#%d", brandID, endpointID, shard)
}
func dueQueuePK(shard int) string { return "DUE#" + strconv.Itoa(shard) }

// dueQueueSK sorts by due time, like the hold queue.
func dueQueueSK(due time.Time, deliveryID string) string { return holdQueueSK(due, deliveryID) }

// cursorKeyringKey holds the keyring that signs list cursors, one per
// deployment (store).
func cursorKeyringKey() store.Key { return store.Key{PK: "CONFIG", SK: "#CURSORKEYS"} }

// rateKey counts one bucket's requests in one window.
func rateKey(bucket string, window int64) store.Key {
	return store.Key{PK: "RATE#" + bucket, SK: strconv.FormatInt(window, 10)}
}
