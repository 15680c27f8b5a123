package keys

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// This file is the whole single-table key design; docs/data-model.md explains
// it. Nothing outside it builds a key. The keys every click and conversion
// writes are concatenated rather than formatted: fmt was a measurable part
// of a click's CPU.

// Shards spreads a brand's high-volume items (conversions, their index
// entries, rollups, events, the hold queue) over several partitions so that
// a brand posting 1,000 conversions a second stays under DynamoDB's
// per-partition write limit. Changing it orphans existing items. (The
// queues across brands have QueueShards.)
const Shards = 4

// ShardOf places an identifier in a shard, stably.
func ShardOf(id string) int { return int(Hash(id) % Shards) }

// QueueShards spreads the queues that every brand's work passes through
// (gsi3: the outbox, the due, hold and wait queues) over enough partitions
// for the table to carry 10,000 conversions a second: each item enters and
// leaves its queue (2 index writes), 20,000 writes a second per queue,
// 625 per partition key, under DynamoDB's 1,000 (docs/aws.md, "Scale").
// The readers read every shard, so raising it orphans nothing; lowering
// it would.
const QueueShards = 32

// QueueShardOf places an identifier in a queue shard, stably.
func QueueShardOf(id string) int { return int(Hash(id) % QueueShards) }

// Hash is 32-bit FNV-1a, written out so that hashing a string or a buffer
// allocates nothing.
func Hash[T string | []byte](id T) uint32 {
	h := uint32(2166136261)
	for i := range len(id) {
		h = (h ^ uint32(id[i])) * 16777619
	}
	return h
}

// Brand partition: the brand record and its low-volume children (offers,
// partners, partner e-mail markers), so that a key built from the caller's
// brand can never reach another brand's item.
func BrandPK(brandID string) string  { return "BRD#" + brandID }
func Brand(brandID string) store.Key { return store.Key{PK: BrandPK(brandID), SK: "#BRAND"} }

// Brands lists every brand (GSI1, by id) for the admin commands; brands
// are few and made rarely, so one partition holds them.
const Brands = "BRANDS"

func Offer(brandID, offerID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "OFF#" + offerID}
}

const OfferSKPrefix = "OFF#"

// OfferRef finds an offer's brand from the offer id alone, for the
// tracking link, which names only the offer. Its Data holds the brand id.
func OfferRef(offerID string) store.Key { return store.Key{PK: "OFF#" + offerID, SK: "#OFF"} }

func Partner(brandID, partnerID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "PRT#" + partnerID}
}

const PartnerSKPrefix = "PRT#"

// PartnerEmail makes one application per e-mail address and brand.
func PartnerEmail(brandID, email string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "PEMAIL#" + email}
}

// API keys are found by the hash of their secret (authentication), by brand
// (listing, GSI1) and by id (revocation, GSI2).
func APIKey(secretHash string) store.Key {
	return store.Key{PK: "KEY#" + secretHash, SK: "#KEY"}
}
func APIKeysByBrand(brandID string) string { return "BRD#" + brandID + "#KEY" }
func APIKeyByID(keyID string) string       { return "KEYID#" + keyID }

// APIKeyCount counts a brand's active keys, so the limit holds under
// concurrent creation.
func APIKeyCount(brandID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "#KEYCOUNT"}
}

// Dashboard users are found by e-mail address (sign-in), which is unique
// across brands, and listed per brand (GSI1). Sessions are found by the
// hash of their token.
func User(email string) store.Key        { return store.Key{PK: "USER#" + email, SK: "#USER"} }
func UsersByBrand(brandID string) string { return "BRD#" + brandID + "#USR" }
func Session(tokenHash string) store.Key { return store.Key{PK: "SESS#" + tokenHash, SK: "#SESS"} }

// The partner portal: an invitation is found by the hash of its token; a
// partner's portal sign-in by its application's e-mail address (one
// address may be a partner of several brands: a partition lists them, by
// brand and partner); a portal session by the hash of its token, apart
// from the dashboard's so that one kind of token never opens the other.
func PortalInvite(tokenHash string) store.Key {
	return store.Key{PK: "PINV#" + tokenHash, SK: "#PINV"}
}
func PortalLatestInvite(brandID, partnerID string) store.Key {
	return store.Key{PK: "PINV#" + brandID + "#" + partnerID, SK: "#LATEST"}
}
func PortalLoginsPK(email string) string { return "PLOGIN#" + email }
func PortalLogin(email, brandID, partnerID string) store.Key {
	return store.Key{PK: PortalLoginsPK(email), SK: brandID + "#" + partnerID}
}
func PortalSession(tokenHash string) store.Key {
	return store.Key{PK: "PSESS#" + tokenHash, SK: "#PSESS"}
}

// Team is the item every change that could take a brand's last owner away
// (a role change, a removal) updates under a condition on its revision,
// so that two such changes at once cannot both pass the owner count.
func Team(brandID string) store.Key { return store.Key{PK: BrandPK(brandID), SK: "#TEAM"} }

// Team invitations and password resets are found by the hash of their
// token; invitations are listed per brand (GSI1, by id) while pending.
func Invitation(tokenHash string) store.Key {
	return store.Key{PK: "INV#" + tokenHash, SK: "#INV"}
}
func InvitationsByBrand(brandID string) string { return "BRD#" + brandID + "#INV" }
func PasswordReset(tokenHash string) store.Key {
	return store.Key{PK: "RST#" + tokenHash, SK: "#RST"}
}

// A brand's audit log: one partition per brand, sorted by entry id (and so
// by time). Entries are people's changes, a few a minute at most, which
// one partition carries.
func AuditPK(brandID string) string { return "BRD#" + brandID + "#AUD" }
func AuditEntry(brandID, entryID string) store.Key {
	return store.Key{PK: AuditPK(brandID), SK: entryID}
}

// A brand's postback token is found by the hash of its secret (the
// postback) and from the brand (showing, rotating and deleting it).
func PostbackToken(secretHash string) store.Key {
	return store.Key{PK: "PBT#" + secretHash, SK: "#PBT"}
}
func BrandPostbackToken(brandID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "#PBTOKEN"}
}

// Conversions live in the brand's conversion shards, sorted by id (and so by
// time). GSI1 lists them per offer, GSI2 per partner, each sharded the same
// way; GSI3 holds pending conversions with a hold time, by due time, across
// brands (sparse: approval or rejection takes them out).
func ConversionPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#CNV#" + strconv.Itoa(shard)
}
func Conversion(brandID, conversionID string) store.Key {
	return store.Key{PK: ConversionPK(brandID, ShardOf(conversionID)), SK: conversionID}
}
func ConversionsByOffer(brandID, offerID string, shard int) string {
	return "BRD#" + brandID + "#OFF#" + offerID + "#CNV#" + strconv.Itoa(shard)
}
func ConversionsByPartner(brandID, partnerID string, shard int) string {
	return "BRD#" + brandID + "#PRT#" + partnerID + "#CNV#" + strconv.Itoa(shard)
}

// Partner money (package ledger): partners' balance counters, per partner
// and currency in Shards items each (summed on read), so that a partner's
// busiest moments conflict less, in the brand's balance shards, so that
// the Payouts page reads every partner's balance in Shards queries; owed
// entries (amounts waiting for a payout: one conversion's, or the sum of
// a stream batch's for one partner and day, or a reversal's negative) in
// the brand's owed shards per currency, sorted by the UTC day they became
// owed, which a payout's "through" bounds.
func BalancePK(brandID string, shard int) string { return "BAL#" + brandID + "#" + strconv.Itoa(shard) }
func Balance(brandID, partnerID, currency string, shard int) store.Key {
	return store.Key{PK: BalancePK(brandID, shard), SK: BalanceSKPrefix(partnerID) + currency}
}

// BalanceSKPrefix starts the sort keys of a partner's balance items.
func BalanceSKPrefix(partnerID string) string { return partnerID + "#" }

// BalanceOf splits a balance item's sort key into partner and currency.
func BalanceOf(sk string) (partnerID, currency string) {
	partnerID, currency, _ = strings.Cut(sk, "#")
	return partnerID, currency
}
func OwedPK(brandID, currency string, shard int) string {
	return "OWED#" + brandID + "#" + currency + "#" + strconv.Itoa(shard)
}
func Owed(brandID, currency string, day time.Time, partnerID, entryID string) store.Key {
	return store.Key{PK: OwedPK(brandID, currency, ShardOf(entryID)), SK: day.UTC().Format(time.DateOnly) + "#" + partnerID + "#" + entryID}
}

// OwedThrough bounds owed entries to those of a UTC day and before.
func OwedThrough(day string) string { return day + "#~" }

// OwedPartner is the partner of an owed entry's sort key.
func OwedPartner(sk string) string {
	_, rest, _ := strings.Cut(sk, "#")
	partner, _, _ := strings.Cut(rest, "#")
	return partner
}

// Payouts are few: in the brand partition, by id; a payout's lines are in
// a partition of its own, by partner.
func Payout(brandID, payoutID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: PayoutSKPrefix + payoutID}
}

const PayoutSKPrefix = "PAY#"

func PayoutLinesPK(payoutID string) string { return "PAY#" + payoutID }
func PayoutLine(payoutID, partnerID string) store.Key {
	return store.Key{PK: PayoutLinesPK(payoutID), SK: "LINE#" + partnerID}
}

func HoldQueuePK(shard int) string { return "HOLD#" + strconv.Itoa(shard) }

// HoldQueueSK sorts by due time; the conversion id keeps entries unique.
func HoldQueueSK(due time.Time, conversionID string) string {
	return fmt.Sprintf("%013d#%s", due.UnixMilli(), conversionID)
}

// HoldQueueUpTo is the inclusive upper bound of entries due at or before t.
func HoldQueueUpTo(t time.Time) string { return fmt.Sprintf("%013d$", t.UnixMilli()) }

// HoldLease is the lease of a hold-queue shard: the approval run that holds
// it drains that shard, and overlapping runs take other shards.
func HoldLease(shard int) store.Key {
	return store.Key{PK: "HOLDLEASE#" + strconv.Itoa(shard), SK: "#LEASE"}
}

// Txn marks an (offer, externalTxnId) pair as recorded; its Data holds
// the conversion id, or the whole conversion when it was written apart
// (conversions' putConversion), so a replay finds the first conversion.
func Txn(brandID, offerID, externalTxnID string) store.Key {
	return store.Key{PK: "TXN#" + brandID + "#" + offerID + "#" + externalTxnID, SK: "#TXN"}
}

// Cap counts an offer's conversions in one cap period.
func Cap(offerID, period string) store.Key {
	return store.Key{PK: "CAP#" + offerID, SK: period}
}

// Clicks live in the brand's click shards, sorted by id, and are listed per
// offer (GSI1) and per partner (GSI2) like conversions.
func ClickPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#CLK#" + strconv.Itoa(shard)
}
func Click(brandID, clickID string) store.Key {
	return store.Key{PK: ClickPK(brandID, ShardOf(clickID)), SK: clickID}
}
func ClicksByOffer(brandID, offerID string, shard int) string {
	return "BRD#" + brandID + "#OFF#" + offerID + "#CLK#" + strconv.Itoa(shard)
}
func ClicksByPartner(brandID, partnerID string, shard int) string {
	return "BRD#" + brandID + "#PRT#" + partnerID + "#CLK#" + strconv.Itoa(shard)
}

// The brand's fraud settings and blocked address ranges live in the brand
// partition; a marker per range keeps each range listed once, a counter
// bounds how many there are.
func FraudSettings(brandID string) store.Key { return store.Key{PK: BrandPK(brandID), SK: "#FRAUD"} }
func BlockedIP(brandID, id string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: BlockedIPSKPrefix + id}
}

const BlockedIPSKPrefix = "BIP#"

func BlockedCIDR(brandID, cidr string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "BIPCIDR#" + cidr}
}
func BlockedIPCount(brandID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "#BIPCOUNT"}
}

// Velocity counts one address's clicks on one offer in one minute.
func Velocity(offerID, ip string, minute int64) store.Key {
	return store.Key{PK: "VEL#" + offerID + "#" + ip, SK: strconv.FormatInt(minute, 10)}
}

// HighRiskPK and HighRisk count a partner's high-risk clicks per UTC hour
// (HighRiskHour: 2026112210), for the auto-ban rule's window.
func HighRiskPK(brandID, partnerID string) string { return "HRC#" + brandID + "#" + partnerID }
func HighRisk(brandID, partnerID string, t time.Time) store.Key {
	return store.Key{PK: HighRiskPK(brandID, partnerID), SK: HighRiskHour(t)}
}
func HighRiskHour(t time.Time) string { return t.UTC().Format("2006010215") }

// Rollups: one item per (day, offer, partner, currency) and shard, with the
// report metrics as counters. A report range-queries each shard by day.
func RollupPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#RU#" + strconv.Itoa(shard)
}
func Rollup(brandID string, shard int, day, offerID, partnerID, currency string) store.Key {
	return store.Key{PK: RollupPK(brandID, shard), SK: day + "#" + offerID + "#" + partnerID + "#" + currency}
}

// RollupDayTo is the inclusive upper bound of a day's rollup sort keys.
func RollupDayTo(day string) string { return day + "$" }

// Quarter-hour rollups hold the same counters per UTC quarter hour
// ("2026-11-22T10:15"), so that a report can cut days at midnight in any
// time zone: every zone's offset from UTC is a whole number of quarter
// hours. The daily rollups serve what lies in whole UTC days.
func RollupQuarterPK(brandID string, shard int) string {
	return "BRD#" + brandID + "#RQ#" + strconv.Itoa(shard)
}
func RollupQuarter(brandID string, shard int, quarter, offerID, partnerID, currency string) store.Key {
	return store.Key{PK: RollupQuarterPK(brandID, shard), SK: quarter + "#" + offerID + "#" + partnerID + "#" + currency}
}

// RollupQuartersFrom and RollupQuartersTo bound the quarter-hour rollup
// sort keys of the days from and to, inclusive.
func RollupQuartersFrom(day string) string { return day + "T" }
func RollupQuartersTo(day string) string   { return day + "T~" }

// RollupCheckpoint holds the last stream record of a shard whose
// conversions were added to the rollups (reports.Service.RollUp). The shard is named by
// its stream's ARN and its id: a stream recreated has new shards.
func RollupCheckpoint(shard string) store.Key {
	return store.Key{PK: "RUCP#" + shard, SK: "#RUCP"}
}

// Events are the outbox: one item each, found by id (the stream and the
// delivery pipeline), per brand (GSI1, sharded) and, until their deliveries
// exist, in the outbox (GSI3, sharded) that the local pipeline drains.
func Event(eventID string) store.Key { return store.Key{PK: "EVT#" + eventID, SK: "#EVT"} }
func EventsByBrand(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#EVT#%d", brandID, shard)
}
func OutboxPK(shard int) string { return "OUTBOX#" + strconv.Itoa(shard) }

// Webhook subscriptions live in the brand partition.
func Subscription(brandID, subscriptionID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "SUB#" + subscriptionID}
}

const SubscriptionSKPrefix = "SUB#"

// SubscriptionCount counts a brand's subscriptions, so the limit holds
// under concurrent creation.
func SubscriptionCount(brandID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "#SUBCOUNT"}
}

// A partner's postback lives in the brand partition next to the partner.
func Postback(brandID, partnerID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: PostbackSKPrefix + partnerID}
}

const PostbackSKPrefix = "PB#"

// Endpoints counts the endpoints (subscriptions and postbacks) ever
// created for a brand, from when it was first written (outbox.OnlyForEndpoints).
func Endpoints(brandID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "#ENDPOINTS"}
}

// Deliveries live in the brand's delivery shards, sorted by id (ids sort by
// the event's time, so a time span and an event id are sort-key ranges).
// GSI1 lists those not succeeded per type and status (the delivery log's
// pending and failed filters), GSI2 per endpoint (a subscription or a partner's postback); while
// pending, GSI3 holds them by due time across brands (the local pipeline's
// queue). Each index is sharded like the table.
func DeliveryPK(brandID string, shard int) string {
	return fmt.Sprintf("BRD#%s#WH#%d", brandID, shard)
}
func Delivery(brandID, deliveryID string) store.Key {
	return store.Key{PK: DeliveryPK(brandID, ShardOf(deliveryID)), SK: deliveryID}
}
func DeliveriesByTypeStatus(brandID, typ, status string, shard int) string {
	return fmt.Sprintf("BRD#%s#WHT#%s#%s#%d", brandID, typ, status, shard)
}

// DeliveriesByEndpoint takes a subscription id or a partner id (the prefix
// tells them apart).
func DeliveriesByEndpoint(brandID, endpointID string, shard int) string {
	return fmt.Sprintf("BRD#%s#EP#%s#WH#%d", brandID, endpointID, shard)
}

// AnswerDictionary is what a delivery's answers from one endpoint (a
// subscription id or a partner id) are compressed against, one a week
// (endpoints.Answers).
func AnswerDictionary(brandID, endpointID string, week int64) store.Key {
	return store.Key{PK: fmt.Sprintf("BRD#%s#ANS#%s", brandID, endpointID), SK: strconv.FormatInt(week, 10)}
}

func DueQueuePK(shard int) string { return "DUE#" + strconv.Itoa(shard) }

// DueQueueSK sorts by due time, like the hold queue.
func DueQueueSK(due time.Time, deliveryID string) string { return HoldQueueSK(due, deliveryID) }

// CursorKeyring holds the keyring that signs list cursors, one per
// deployment (store).
func CursorKeyring() store.Key { return store.Key{PK: "CONFIG", SK: "#CURSORKEYS"} }

// SecretKey holds the data key that seals webhook signing secrets, wrapped
// (package secretbox), one per deployment (store).
func SecretKey() store.Key { return store.Key{PK: "CONFIG", SK: "#SECRETKEY"} }

// Readiness is never written: GET /readyz reads it to see the store answer.
func Readiness() store.Key { return store.Key{PK: "CONFIG", SK: "#READY"} }

// Rate counts one bucket's requests in one window.
func Rate(bucket string, window int64) store.Key {
	return store.Key{PK: "RATE#" + bucket, SK: strconv.FormatInt(window, 10)}
}

// RateShard is shard n (n > 0) of a bucket's counter in one window; shard 0
// is Rate's item. Each shard has a partition key of its own, so that one
// bucket's counter spreads over as many partitions.
func RateShard(bucket string, window int64, n int) store.Key {
	if n == 0 {
		return Rate(bucket, window)
	}
	return store.Key{PK: "RATE#" + bucket + "#" + strconv.Itoa(n), SK: strconv.FormatInt(window, 10)}
}

// Breaker is an endpoint's circuit breaker item.
func Breaker(brandID, endpointID string) store.Key {
	return store.Key{PK: BrandPK(brandID), SK: "BRK#" + endpointID}
}

// ParkedPK is an endpoint's wait list in gsi3, sharded by delivery so that
// a flood of deliveries to one endpoint spreads its writes.
func ParkedPK(brandID, endpointID string, shard int) string {
	return "WAIT#" + brandID + "#" + endpointID + "#" + strconv.Itoa(shard)
}
