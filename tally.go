// Package tally holds the domain types of the Tally tracking service: brands,
// API keys, offers, partners, conversions, report rows and events. The
// services that act on them live in internal/.
package tally

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Brand is a tenant. Every other record belongs to exactly one brand.
type Brand struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Timezone is the IANA zone the brand's days are counted in on the
	// dashboard (its overview, date ranges and times); UTC unless set.
	Timezone  string `json:"timezone"`
	CreatedAt Time   `json:"createdAt"`
}

// APIKey authenticates a brand. Only a hash of the secret is stored; the
// secret itself is shown once, when the key is created.
type APIKey struct {
	ID        string `json:"id"`
	BrandID   string `json:"brandId"`
	Name      string `json:"name"`   // the brand's label for the key; may be empty
	Prefix    string `json:"prefix"` // first characters of the secret, to tell keys apart
	CreatedAt Time   `json:"createdAt"`
	// LastUsedAt is when the key last authenticated a request, to the
	// minute (it is written at most once a minute, not on every request).
	LastUsedAt *Time `json:"lastUsedAt"`
	RevokedAt  *Time `json:"revokedAt"`
}

// User signs in to the dashboard and sees only the brand it belongs to.
// Its password is stored as an Argon2id hash and never shown.
type User struct {
	ID      string `json:"id"`
	BrandID string `json:"brandId"`
	Email   string `json:"email"`
	// Role is RoleOwner (changes anything, manages the team) or
	// RoleViewer (sees everything, changes nothing).
	Role      string `json:"role"`
	CreatedAt Time   `json:"createdAt"`
}

// Roles of a brand's users.
const (
	RoleOwner  = "owner"
	RoleViewer = "viewer"
)

// Offer statuses and approval modes.
const (
	OfferActive = "active"
	OfferPaused = "paused"

	ApprovalAuto   = "auto"
	ApprovalManual = "manual"
)

// Offer is something a brand pays partners to promote.
type Offer struct {
	ID             string `json:"id"`
	BrandID        string `json:"brandId"`
	Name           string `json:"name"`
	DestinationURL string `json:"destinationUrl"`
	RevenueCents   int64  `json:"revenueCents"`
	// PayoutCents is what a conversion pays its partner, unless
	// PayoutPercent (then 0) pays a share of its revenue instead.
	PayoutCents   int64    `json:"payoutCents"`
	PayoutPercent *Percent `json:"payoutPercent"`
	Currency      string   `json:"currency"`
	Status        string   `json:"status"`
	Approval      string   `json:"approval"`
	// HoldHours is how long a pending conversion waits before it is approved
	// automatically; 0 means it waits for a manual decision.
	HoldHours int  `json:"holdHours"`
	Caps      Caps `json:"caps"`
	// AttributionWindowDays is how long after a click a conversion can
	// still name it (clickId).
	AttributionWindowDays int `json:"attributionWindowDays"`
	// FallbackURL is where the tracking link sends visitors, without
	// recording a click, while the offer is paused or capped or the
	// link's partner is not active; empty: none.
	FallbackURL string `json:"fallbackUrl,omitempty"`
	CreatedAt   Time   `json:"createdAt"`
	UpdatedAt   Time   `json:"updatedAt"`
}

// DefaultAttributionWindowDays is an offer's attribution window unless it
// sets one.
const DefaultAttributionWindowDays = 30

// Caps limit how many conversions an offer accepts per UTC day, ISO week,
// calendar month, or ever. Nil means no limit.
type Caps struct {
	Daily   *int64 `json:"daily" range:"1,1000000000"`
	Weekly  *int64 `json:"weekly" range:"1,1000000000"`
	Monthly *int64 `json:"monthly" range:"1,1000000000"`
	Global  *int64 `json:"global" range:"1,1000000000"`
}

// Partner statuses.
const (
	PartnerApplied  = "applied"
	PartnerActive   = "active"
	PartnerRejected = "rejected"
	PartnerBanned   = "banned"
)

// Partner is an affiliate working with a brand.
type Partner struct {
	ID        string `json:"id"`
	BrandID   string `json:"brandId"`
	Name      string `json:"name"`
	Email     string `json:"email"`
	Website   string `json:"website,omitempty"`
	Message   string `json:"message,omitempty"`
	Status    string `json:"status"`
	CreatedAt Time   `json:"createdAt"`
	UpdatedAt Time   `json:"updatedAt"`
}

// Conversion statuses.
const (
	ConversionPending  = "pending"
	ConversionApproved = "approved"
	ConversionRejected = "rejected"
	ConversionReversed = "reversed"
)

// Why an approved conversion was reversed.
const (
	ReversalRefund     = "refund"
	ReversalChargeback = "chargeback"
	ReversalFraud      = "fraud"
	ReversalOther      = "other"
)

// Conversion is one recorded sale or lead, posted server-side by an advertiser.
type Conversion struct {
	ID            string `json:"id"`
	BrandID       string `json:"brandId"`
	OfferID       string `json:"offerId"`
	PartnerID     string `json:"partnerId"`
	ClickID       string `json:"clickId,omitempty"`
	RevenueCents  int64  `json:"revenueCents"`
	PayoutCents   int64  `json:"payoutCents"`
	Currency      string `json:"currency"`
	Status        string `json:"status"`
	Sub1          string `json:"sub1"`
	Sub2          string `json:"sub2"`
	Sub3          string `json:"sub3"`
	Sub4          string `json:"sub4"`
	Sub5          string `json:"sub5"`
	ExternalTxnID string `json:"externalTxnId"`
	// ApproveAt is when a pending conversion is approved automatically.
	ApproveAt *Time `json:"approveAt"`
	// ApprovedAt is when the conversion was approved (its creation, when
	// the offer approves automatically); a payout's "through" counts it.
	ApprovedAt *Time `json:"approvedAt,omitempty"`
	// ReversalReason, ReversalNote and ReversedAt say why and when an
	// approved conversion was reversed.
	ReversalReason string `json:"reversalReason,omitempty"`
	ReversalNote   string `json:"reversalNote,omitempty"`
	ReversedAt     *Time  `json:"reversedAt,omitempty"`
	CreatedAt      Time   `json:"createdAt"`
	UpdatedAt      Time   `json:"updatedAt"`
}

// Click is one visit through a partner's tracking link, scored for fraud
// when it was recorded.
type Click struct {
	ID        string `json:"id"`
	BrandID   string `json:"brandId"`
	OfferID   string `json:"offerId"`
	PartnerID string `json:"partnerId"`
	IP        string `json:"ip"`
	UserAgent string `json:"userAgent"`
	Referer   string `json:"referer"`
	Sub1      string `json:"sub1"`
	Sub2      string `json:"sub2"`
	Sub3      string `json:"sub3"`
	Sub4      string `json:"sub4"`
	Sub5      string `json:"sub5"`
	// FraudScore is 0 (clean) to 100; FraudSignals say what raised it.
	FraudScore   int      `json:"fraudScore"`
	FraudSignals []string `json:"fraudSignals"`
	// ConversionID is the latest conversion attributed to the click
	// (recorded with its clickId); empty while there is none.
	ConversionID string `json:"conversionId,omitempty"`
	CreatedAt    Time   `json:"createdAt"`
}

// Fraud signals a click can raise.
const (
	SignalDatacenterIP     = "datacenter_ip"
	SignalBlockedIP        = "blocked_ip"
	SignalBotUserAgent     = "bot_user_agent"
	SignalMissingUserAgent = "missing_user_agent"
	SignalIPVelocity       = "ip_velocity"
)

// ReportRow is one row of a report: the metrics of the conversions that share
// the row's grouping values. Grouping fields not asked for are omitted; rows
// are always split by currency.
type ReportRow struct {
	Day         string `json:"day,omitempty"`
	Week        string `json:"week,omitempty"`
	Month       string `json:"month,omitempty"`
	OfferID     string `json:"offerId,omitempty"`
	PartnerID   string `json:"partnerId,omitempty"`
	Currency    string `json:"currency"`
	Conversions int64  `json:"conversions"`
	Pending     int64  `json:"pending"`
	Approved    int64  `json:"approved"`
	Rejected    int64  `json:"rejected"`
	// Reversed counts approved conversions reversed since (refunds,
	// chargebacks); they no longer count in approved.
	Reversed     int64 `json:"reversed"`
	RevenueCents int64 `json:"revenueCents"`
	PayoutCents  int64 `json:"payoutCents"`
	ProfitCents  int64 `json:"profitCents"`
	// Clicks count in the row of the offer's currency.
	Clicks         int64 `json:"clicks"`
	HighRiskClicks int64 `json:"highRiskClicks"`
}

// Event names.
const (
	EventConversionCreated  = "conversion.created"
	EventConversionApproved = "conversion.approved"
	EventConversionRejected = "conversion.rejected"
	EventConversionReversed = "conversion.reversed"
	EventPartnerApplied     = "partner.applied"
	EventPartnerApproved    = "partner.approved"
	EventPartnerRejected    = "partner.rejected"
	EventPartnerBanned      = "partner.banned"
	EventPartnerReactivated = "partner.reactivated"
	EventFraudHighRisk      = "fraud.high_risk"
	EventCapReached         = "cap.reached"
	EventWebhookTest        = "webhook.test"
	EventPayoutPaid         = "payout.paid"
)

// PostbackTestEvent asks for a partner's postback to be sent with sample
// values. It goes to that postback only; it is no webhook event, so not in
// the catalog.
const PostbackTestEvent = "postback.test"

// Event is the envelope of every webhook delivery (spec section 2). It is
// written in the same transaction as the change it reports.
type Event struct {
	ID        string          `json:"id"`
	Event     string          `json:"event"`
	CreatedAt Time            `json:"createdAt"`
	BrandID   string          `json:"brandId"`
	Data      json.RawMessage `json:"data"`
}

// ConversionEventData is the data of the conversion.* events.
type ConversionEventData struct {
	ConversionID  string `json:"conversionId"`
	PartnerID     string `json:"partnerId"`
	OfferID       string `json:"offerId"`
	RevenueCents  int64  `json:"revenueCents"`
	PayoutCents   int64  `json:"payoutCents"`
	Currency      string `json:"currency"`
	Status        string `json:"status"`
	Sub1          string `json:"sub1"`
	ExternalTxnID string `json:"externalTxnId"`
	// ClickID is the tracked click the conversion was attributed to.
	ClickID string `json:"clickId,omitempty"`
	// Reason says why a conversion changed status: "manual", or
	// "hold_elapsed" for automatic approval. Empty on conversion.created.
	Reason string `json:"reason,omitempty"`
	// ReversalReason and ReversalNote are on conversion.reversed only.
	ReversalReason string `json:"reversalReason,omitempty"`
	ReversalNote   string `json:"reversalNote,omitempty"`
}

// PartnerEventData is the data of the partner.* events.
type PartnerEventData struct {
	PartnerID      string `json:"partnerId"`
	Name           string `json:"name"`
	Email          string `json:"email"`
	Status         string `json:"status"`
	PreviousStatus string `json:"previousStatus,omitempty"`
	// Reason and Rule say who banned a partner (partner.banned only):
	// "manual", or "automation" with the rule that fired.
	Reason string `json:"reason,omitempty"`
	Rule   string `json:"rule,omitempty"`
}

// Why a partner was banned, and the automation rule that can ban.
const (
	BanManual          = "manual"
	BanAutomation      = "automation"
	RuleHighRiskClicks = "fraud.high_risk_clicks"
)

// CapReachedEventData is the data of cap.reached.
type CapReachedEventData struct {
	OfferID      string `json:"offerId"`
	Cap          string `json:"cap"` // daily, weekly, monthly or global
	Limit        int64  `json:"limit"`
	Period       string `json:"period"` // e.g. 2026-11-22, 2026-W47, 2026-11, or "global"
	ConversionID string `json:"conversionId"`
}

// FraudEventData is the data of fraud.high_risk: a click scored above the
// brand's threshold.
type FraudEventData struct {
	ClickID   string   `json:"clickId"`
	OfferID   string   `json:"offerId"`
	PartnerID string   `json:"partnerId"`
	Score     int      `json:"score"`     // 0..100
	Threshold int      `json:"threshold"` // the brand's threshold that the score exceeded
	Signals   []string `json:"signals"`   // the Signal* names that raised the score
	IP        string   `json:"ip"`
	UserAgent string   `json:"userAgent"`
}

// FraudSettings are a brand's fraud rules: a click whose score exceeds
// Threshold is high-risk; AutoBan bans a partner with too many of those.
type FraudSettings struct {
	Threshold int     `json:"threshold"`
	AutoBan   AutoBan `json:"autoBan"`
}

// AutoBan is the automation rule that bans a partner once HighRiskClicks of
// its clicks within the last WindowHours were high-risk.
type AutoBan struct {
	Enabled        bool `json:"enabled"`
	HighRiskClicks int  `json:"highRiskClicks"`
	WindowHours    int  `json:"windowHours"`
}

// DefaultFraudSettings apply to a brand until it changes them.
var DefaultFraudSettings = FraudSettings{Threshold: 70, AutoBan: AutoBan{Enabled: false, HighRiskClicks: 20, WindowHours: 24}}

// PostbackToken authorizes a brand's inbound GET postbacks (advertisers'
// systems call /postback?click_id=…&token=…). Only a hash of the secret is
// stored; it is shown once, when the token is made.
type PostbackToken struct {
	ID        string `json:"id"`
	BrandID   string `json:"brandId"`
	Prefix    string `json:"prefix"` // first characters of the secret, to tell tokens apart
	CreatedAt Time   `json:"createdAt"`
}

// BlockedIP is an address range whose clicks a brand considers fraudulent.
type BlockedIP struct {
	ID        string `json:"id"`
	BrandID   string `json:"brandId"`
	CIDR      string `json:"cidr"`
	Note      string `json:"note"`
	CreatedAt Time   `json:"createdAt"`
}

// WebhookTestEventData is the data of webhook.test, sent on request to one
// subscription.
type WebhookTestEventData struct {
	SubscriptionID string `json:"subscriptionId"`
	Message        string `json:"message"`
}

// TimeLayout is how every timestamp is written: RFC 3339, UTC, milliseconds.
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Time is a time.Time that marshals as RFC 3339 UTC with milliseconds.
type Time struct{ time.Time }

// NewTime truncates t to milliseconds in UTC.
func NewTime(t time.Time) Time { return Time{t.UTC().Truncate(time.Millisecond)} }

// MarshalJSON writes e.g. "2026-11-22T10:04:05.123Z".
func (t Time) MarshalJSON() ([]byte, error) {
	b := make([]byte, 0, len(TimeLayout)+2)
	return append(t.UTC().AppendFormat(append(b, '"'), TimeLayout), '"'), nil
}

// UnmarshalJSON accepts RFC 3339.
func (t *Time) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return err
	}
	t.Time = parsed.UTC()
	return nil
}

// Subscription is a brand's webhook receiver: which events go to which URL.
// The signing secret is never shown after creation; HasSecret says whether
// deliveries are signed.
type Subscription struct {
	ID        string   `json:"id"`
	BrandID   string   `json:"brandId"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	HasSecret bool     `json:"hasSecret"`
	// SignatureScheme is SchemeTally (X-Tally-Signature, the default) or
	// SchemeStandardWebhooks; SignatureAlgorithm, with the latter,
	// AlgorithmHMAC or AlgorithmEd25519.
	SignatureScheme    string `json:"signatureScheme"`
	SignatureAlgorithm string `json:"signatureAlgorithm,omitempty"`
	// PublicKey (whpk_…) verifies an ed25519 subscription's deliveries.
	PublicKey string `json:"publicKey,omitempty"`
	// Secret is a secret Tally generated (a standard-webhooks whsec_
	// secret), in the one answer that made it; it is never shown again.
	Secret string `json:"secret,omitempty"`
	// PreviousSecretExpiresAt is set while a rotated-out secret (or
	// signing key) still signs deliveries next to the new one.
	PreviousSecretExpiresAt *Time `json:"previousSecretExpiresAt,omitempty"`
	// MaxPerSecond paces deliveries to the endpoint (1–1000; nil: none).
	MaxPerSecond *int `json:"maxPerSecond,omitempty"`
	EndpointHealth
	CreatedAt Time `json:"createdAt"`
	UpdatedAt Time `json:"updatedAt"`
}

// Signature schemes and algorithms of a subscription.
const (
	SchemeTally            = "tally"             // X-Tally-Signature: t=…,v1=<hex HMAC-SHA256>
	SchemeStandardWebhooks = "standard-webhooks" // webhook-id, webhook-timestamp, webhook-signature
	AlgorithmHMAC          = "hmac-sha256"       // v1,<base64 HMAC-SHA256>, whsec_ secret
	AlgorithmEd25519       = "ed25519"           // v1a,<base64 Ed25519>, whpk_ public key
)

// Postback is a partner's postback: a URL template that Tally fills in and
// GETs when one of the partner's conversions has one of the events.
type Postback struct {
	PartnerID string   `json:"partnerId"`
	BrandID   string   `json:"brandId"`
	URL       string   `json:"url"`
	Events    []string `json:"events"`
	// MaxPerSecond paces deliveries to the endpoint (1–1000; nil: none).
	MaxPerSecond *int `json:"maxPerSecond,omitempty"`
	EndpointHealth
	CreatedAt Time `json:"createdAt"`
	UpdatedAt Time `json:"updatedAt"`
}

// Endpoint statuses and the reasons an endpoint is disabled.
const (
	EndpointEnabled  = "enabled"
	EndpointDisabled = "disabled"

	DisabledConsecutiveFailures = "consecutive_failures" // too many failed attempts in a row
	DisabledFailingTooLong      = "failing_too_long"     // failing for too long with no success
	DisabledGone                = "gone"                 // the receiver answered 410 Gone
)

// EndpointHealth is how deliveries to an endpoint (a webhook subscription or
// a partner postback) have gone. A disabled endpoint gets no new deliveries.
type EndpointHealth struct {
	Status              string `json:"status"`
	DisabledReason      string `json:"disabledReason,omitempty"`
	DisabledAt          *Time  `json:"disabledAt,omitempty"`
	ConsecutiveFailures int64  `json:"consecutiveFailures"`
	LastSuccessAt       *Time  `json:"lastSuccessAt"`
	// FailingSince is the first failed attempt after the last success (or
	// since the endpoint was enabled); nil while the last attempt succeeded.
	FailingSince *Time `json:"failingSince"`
}

// Delivery types and statuses.
const (
	DeliveryWebhook  = "webhook"  // a signed POST of the event to a subscription
	DeliveryPostback = "postback" // a GET of a partner's filled-in postback URL

	DeliveryPending   = "pending"
	DeliverySucceeded = "succeeded"
	DeliveryFailed    = "failed"
)

// Delivery is one event sent to one subscription, with every attempt.
type Delivery struct {
	ID             string    `json:"id"` // wh_…, the X-Tally-Webhook-Id, the same on every retry
	BrandID        string    `json:"brandId"`
	Type           string    `json:"type"` // DeliveryWebhook or DeliveryPostback
	EventID        string    `json:"eventId"`
	Event          string    `json:"event"`
	SubscriptionID string    `json:"subscriptionId,omitempty"` // webhooks
	PartnerID      string    `json:"partnerId,omitempty"`      // postbacks
	URL            string    `json:"url"`                      // for a postback, filled in
	Status         string    `json:"status"`
	Attempts       []Attempt `json:"attempts"`
	NextAttemptAt  *Time     `json:"nextAttemptAt"`
	// Request is what the delivery sends, as the log shows it; it is made
	// when read (from the event, which holds the body), not stored.
	Request   *DeliveryRequest `json:"request,omitempty"`
	CreatedAt Time             `json:"createdAt"`
	UpdatedAt Time             `json:"updatedAt"`
}

// DeliveryRequest is the HTTP request of a delivery: as its last attempt
// sent it (or its first will), with the signature values masked.
type DeliveryRequest struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	Body    *string           `json:"body"` // null for a postback (a GET)
}

// Attempt error kinds: why an attempt got no HTTP status.
const (
	AttemptTimeout           = "timeout"
	AttemptConnectionRefused = "connection_refused"
	AttemptDNS               = "dns"
	AttemptTLS               = "tls"
	AttemptBlocked           = "blocked_address" // the URL resolved to an address receivers may not have (SSRF guard)
	AttemptNetwork           = "network"         // any other transport failure
)

// Attempt is one HTTP request of a delivery.
type Attempt struct {
	At         Time   `json:"at"`
	StatusCode int    `json:"statusCode,omitempty"` // the receiver's status; 0 when no response came
	Error      string `json:"error,omitempty"`      // one of the Attempt* kinds when the attempt broke off, even after the status line
	LatencyMs  int64  `json:"latencyMs"`
	Response   string `json:"response"` // the first 4 KiB of the receiver's body
	// RetryAfter is the wait a 429 or 503 asked for with Retry-After (0:
	// none, or one that was not a usable wait). Only the attempt's own
	// decision uses it; it is not kept.
	RetryAfter time.Duration `json:"-"`
}

// Gone reports whether the receiver answered 410 Gone: it wants no more
// deliveries.
func (a Attempt) Gone() bool { return a.Error == "" && a.StatusCode == 410 }

// Succeeded reports whether the receiver accepted the delivery: a 2xx whose
// whole response came within the time limit.
func (a Attempt) Succeeded() bool { return a.Error == "" && a.StatusCode >= 200 && a.StatusCode < 300 }

// Balance is what a brand owes one partner in one currency, by where the
// money stands (DESIGN.md, "Money").
type Balance struct {
	Currency string `json:"currency"`
	// PendingCents: payouts of pending conversions.
	PendingCents int64 `json:"pendingCents"`
	// OwedCents: approved conversions in no payout, minus reversals of
	// conversions already in one (clawbacks); it can be negative.
	OwedCents int64 `json:"owedCents"`
	// InPayoutCents: lines of payouts not yet paid.
	InPayoutCents int64 `json:"inPayoutCents"`
	// PaidCents: lines of paid payouts.
	PaidCents int64 `json:"paidCents"`
}

// Payout statuses.
const (
	PayoutPending = "pending"
	PayoutPaid    = "paid"
)

// Payout is a batch of what a brand owes its partners in one currency,
// which the brand pays by its own means and then marks paid.
type Payout struct {
	ID       string `json:"id"`
	BrandID  string `json:"brandId"`
	Currency string `json:"currency"`
	Status   string `json:"status"`
	// Through is the last UTC day whose approvals it includes; empty: up
	// to when it was created.
	Through     string       `json:"through,omitempty"`
	TotalCents  int64        `json:"totalCents"`
	Conversions int64        `json:"conversions"`
	Lines       []PayoutLine `json:"lines,omitempty"`
	CreatedAt   Time         `json:"createdAt"`
	PaidAt      *Time        `json:"paidAt"`
}

// PayoutLine is what one payout pays one partner: the sum of its owed
// entries (conversions, less clawbacks).
type PayoutLine struct {
	PartnerID   string `json:"partnerId"`
	AmountCents int64  `json:"amountCents"`
	Conversions int64  `json:"conversions"`
}

// PayoutEventData is the data of payout.paid; the payout's lines are at
// GET /payouts/{id}.
type PayoutEventData struct {
	PayoutID    string `json:"payoutId"`
	Currency    string `json:"currency"`
	TotalCents  int64  `json:"totalCents"`
	Conversions int64  `json:"conversions"`
	Partners    int    `json:"partners"`
}

// Percent is a percentage with at most two decimals, kept exactly as
// hundredths of a percent (basis points): 12.5% is 1250. It is written
// in JSON as a number, 12.5.
type Percent int64

// Of is p of cents, rounded half up to the unit.
func (p Percent) Of(cents int64) int64 { return (cents*int64(p) + 5000) / 10000 }

func (p Percent) String() string {
	s := strconv.FormatInt(int64(p)/100, 10)
	if frac := int64(p) % 100; frac != 0 {
		s += "." + strings.TrimRight(fmt.Sprintf("%02d", frac), "0")
	}
	return s
}

func (p Percent) MarshalJSON() ([]byte, error) { return []byte(p.String()), nil }

func (p *Percent) UnmarshalJSON(b []byte) error {
	v, err := ParsePercent(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// ParsePercent reads a non-negative decimal with at most two decimals,
// such as 12.5, exactly.
func ParsePercent(s string) (Percent, error) {
	whole, frac, _ := strings.Cut(s, ".")
	if whole == "" || len(whole) > 6 || len(frac) > 2 || strings.Contains(s, ".") && frac == "" {
		return 0, fmt.Errorf("%q is not a percentage with at most two decimals", s)
	}
	for _, r := range whole + frac {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a percentage with at most two decimals", s)
		}
	}
	w, _ := strconv.ParseInt(whole, 10, 64)
	f, _ := strconv.ParseInt((frac + "00")[:2], 10, 64)
	return Percent(w*100 + f), nil
}

// PayoutTerms are what one partner earns on one offer, instead of the
// offer's own payout: a fixed amount or a share of each conversion's
// revenue (exactly one of the two).
type PayoutTerms struct {
	OfferID       string   `json:"offerId"`
	PartnerID     string   `json:"partnerId"`
	PayoutCents   *int64   `json:"payoutCents"`
	PayoutPercent *Percent `json:"payoutPercent"`
	UpdatedAt     Time     `json:"updatedAt"`
}
