package clicks

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/cidr"
	"github.com/tally-hq/tally/internal/fraud"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Bounds of the fraud settings.
const (
	maxHighRiskClicks = 10_000
	maxBanWindowHours = 720 // 30 days
	maxBlockedIPs     = 1000
	maxBlockedIPNote  = 500
)

// FraudSettingsInput is the body of PUT /fraud/settings: the whole
// settings, every field required.
type FraudSettingsInput struct {
	Threshold *int          `json:"threshold"`
	AutoBan   *AutoBanInput `json:"autoBan"`
}

// AutoBanInput is the autoBan object of FraudSettingsInput.
type AutoBanInput struct {
	Enabled        *bool `json:"enabled"`
	HighRiskClicks *int  `json:"highRiskClicks"`
	WindowHours    *int  `json:"windowHours"`
}

func (in FraudSettingsInput) settings() (tally.FraudSettings, error) {
	switch {
	case in.Threshold == nil:
		return tally.FraudSettings{}, validate.Invalid("threshold is required.")
	case *in.Threshold < 0 || *in.Threshold > 100:
		return tally.FraudSettings{}, validate.Invalid("threshold must be a whole number from 0 to 100; clicks scoring above it are high-risk.")
	case in.AutoBan == nil:
		return tally.FraudSettings{}, validate.Invalid("autoBan is required: {\"enabled\", \"highRiskClicks\", \"windowHours\"}.")
	case in.AutoBan.Enabled == nil:
		return tally.FraudSettings{}, validate.Invalid("autoBan.enabled is required.")
	case in.AutoBan.HighRiskClicks == nil || *in.AutoBan.HighRiskClicks < 1 || *in.AutoBan.HighRiskClicks > maxHighRiskClicks:
		return tally.FraudSettings{}, validate.Invalid("autoBan.highRiskClicks must be a whole number from 1 to %d.", maxHighRiskClicks)
	case in.AutoBan.WindowHours == nil || *in.AutoBan.WindowHours < 1 || *in.AutoBan.WindowHours > maxBanWindowHours:
		return tally.FraudSettings{}, validate.Invalid("autoBan.windowHours must be a whole number from 1 to %d.", maxBanWindowHours)
	}
	return tally.FraudSettings{Threshold: *in.Threshold, AutoBan: tally.AutoBan{
		Enabled: *in.AutoBan.Enabled, HighRiskClicks: *in.AutoBan.HighRiskClicks, WindowHours: *in.AutoBan.WindowHours,
	}}, nil
}

// FraudSettings returns the brand's fraud settings (the defaults until it
// changes them).
func (s *Service) FraudSettings(ctx context.Context, brandID string) (tally.FraudSettings, error) {
	settings, err := records.Get[tally.FraudSettings](ctx, s.db, keys.FraudSettings(brandID))
	if errors.Is(err, store.ErrNotFound) {
		return tally.DefaultFraudSettings, nil
	}
	return settings, err
}

// UpdateFraudSettings replaces the brand's fraud settings. They apply to
// clicks from now on (on other instances within the cache time).
func (s *Service) UpdateFraudSettings(ctx context.Context, brandID string, in FraudSettingsInput) (tally.FraudSettings, error) {
	settings, err := in.settings()
	if err != nil {
		return settings, err
	}
	before, err := s.FraudSettings(ctx, brandID)
	if err != nil {
		return settings, err
	}
	if err := s.events.Transact(ctx, append([]store.Op{store.Put(store.Item{Key: keys.FraudSettings(brandID), Data: records.MustJSON(settings)})},
		audit.Record(ctx, brandID, audit.FraudSettingsUpdated, brandID, audit.Changes(before, settings), s.db.Now())...)...); err != nil {
		return settings, err
	}
	s.configs.Forget(brandID)
	return settings, nil
}

// BlockedIPInput is the body of POST /fraud/blocked-ips.
type BlockedIPInput struct {
	CIDR *string `json:"cidr"`
	Note *string `json:"note"`
}

// BlockIP adds an address range to the brand's blocklist: its clicks raise
// blocked_ip. Each range is listed once (409 for a second time).
func (s *Service) BlockIP(ctx context.Context, brandID string, in BlockedIPInput) (tally.BlockedIP, error) {
	if err := validate.Text("cidr", in.CIDR, true, 64); err != nil {
		return tally.BlockedIP{}, err
	}
	if err := validate.Text("note", in.Note, false, maxBlockedIPNote); err != nil {
		return tally.BlockedIP{}, err
	}
	prefix, err := cidr.Parse(strings.TrimSpace(*in.CIDR))
	if err != nil {
		return tally.BlockedIP{}, validate.Invalid("cidr must be an IPv4 or IPv6 address or CIDR range, such as 203.0.113.0/24 or 2001:db8::/48.")
	}
	if widest := widestBlock(prefix); prefix.Bits() < widest {
		return tally.BlockedIP{}, validate.InvalidField("cidr", "cidr %s is wider than a /%d: it would mark the clicks of a large part of the internet (every click, for a /0) as blocked_ip. Block the ranges the fraud comes from.", prefix, widest)
	}
	now := s.db.Now()
	b := tally.BlockedIP{ID: ids.New("bip_", now), BrandID: brandID, CIDR: prefix.String(), Note: validate.Deref(in.Note, ""), CreatedAt: tally.NewTime(now)}
	err = s.events.Transact(ctx, append([]store.Op{
		store.Increment(keys.BlockedIPCount(brandID), map[string]int64{"n": 1}, store.NumLess("n", maxBlockedIPs)),
		store.Put(store.Item{Key: keys.BlockedCIDR(brandID, b.CIDR), Data: records.MustJSON(b.ID)}, store.NotExists()),
		store.Put(store.Item{Key: keys.BlockedIP(brandID, b.ID), Data: records.MustJSON(b)}, store.NotExists())},
		audit.Record(ctx, brandID, audit.AddressBlocked, b.ID, strings.TrimSpace(b.CIDR+" "+b.Note), now)...)...)
	switch i, failed := store.FailedOp(err); {
	case failed && i == 0:
		return tally.BlockedIP{}, tally.Errorf(tally.ECodeConflict, "A brand blocks at most %d ranges; delete one first, or block a wider range.", maxBlockedIPs)
	case failed && i == 1:
		return tally.BlockedIP{}, tally.Errorf(tally.ECodeConflict, "%s is blocked already.", b.CIDR)
	case err != nil:
		return tally.BlockedIP{}, err
	}
	s.configs.Forget(brandID)
	return b, nil
}

// widestBlock is the shortest prefix a brand may block: the unit in which
// IANA hands address space to a regional registry (an IPv4 /8, an IPv6
// /12). A wider range spans several registries' space; no source of fraud
// is that wide, and 0.0.0.0/0 or ::/0 would score every click 100.
func widestBlock(p netip.Prefix) int {
	if p.Addr().Is4() {
		return 8
	}
	return 12
}

// BlockedIPs lists the brand's blocked ranges, newest first.
func (s *Service) BlockedIPs(ctx context.Context, brandID string, p records.ListParams) ([]tally.BlockedIP, string, error) {
	sp := records.Span{Parts: []records.Partition{{PK: keys.BrandPK(brandID)}}, Prefix: keys.BlockedIPSKPrefix}
	return records.ListSpan[tally.BlockedIP](ctx, s.db, sp, p, nil)
}

// UnblockIP removes a range from the brand's blocklist and returns it.
func (s *Service) UnblockIP(ctx context.Context, brandID, id string) (tally.BlockedIP, error) {
	b, err := records.GetByID[tally.BlockedIP](ctx, s.db, "blocked IP range", "bip_", id, func() store.Key { return keys.BlockedIP(brandID, id) })
	if err != nil {
		return b, err
	}
	err = s.events.Transact(ctx, append([]store.Op{
		store.Delete(keys.BlockedIP(brandID, id), store.Exists()),
		store.Delete(keys.BlockedCIDR(brandID, b.CIDR)),
		store.Increment(keys.BlockedIPCount(brandID), map[string]int64{"n": -1})},
		audit.Record(ctx, brandID, audit.AddressUnblocked, b.ID, b.CIDR, s.db.Now())...)...)
	if _, failed := store.FailedOp(err); failed {
		return tally.BlockedIP{}, records.NotFound(store.ErrNotFound, "blocked IP range", id) // deleted meanwhile
	}
	if err != nil {
		return tally.BlockedIP{}, err
	}
	s.configs.Forget(brandID)
	return b, nil
}

// fraudConfig is what scoring a brand's clicks needs, cached per instance.
type fraudConfig struct {
	settings tally.FraudSettings
	blocked  *fraud.IPSet
}

func (s *Service) fraudConfig(ctx context.Context, brandID string) (fraudConfig, error) {
	if fc, ok := s.configs.Get(brandID); ok {
		return fc, nil
	}
	settings, err := s.FraudSettings(ctx, brandID)
	if err != nil {
		return fraudConfig{}, err
	}
	q := store.Query{PK: keys.BrandPK(brandID), SKPrefix: keys.BlockedIPSKPrefix, Limit: maxBlockedIPs}
	var prefixes []netip.Prefix
	for {
		page, err := s.db.Query(ctx, q)
		if err != nil {
			return fraudConfig{}, err
		}
		for _, it := range page.Items {
			var b tally.BlockedIP
			if err := records.Decode(it, &b); err != nil {
				return fraudConfig{}, err
			}
			p, err := cidr.Parse(b.CIDR)
			if err != nil {
				return fraudConfig{}, fmt.Errorf("blocked IP %s: %w", b.ID, err)
			}
			prefixes = append(prefixes, p)
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			break
		}
	}
	fc := fraudConfig{settings: settings, blocked: fraud.NewIPSet(prefixes)}
	s.configs.Put(brandID, fc)
	return fc, nil
}
