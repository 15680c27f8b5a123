// Package partners keeps the brands' partners (affiliates): their
// applications and the transitions between their states, each with its
// event.
package partners

import (
	"context"
	"strings"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service keeps the partners.
type Service struct {
	db     *records.DB
	events *outbox.Writer
	brands brands
}

// brands finds the brand a partner applies to.
type brands interface {
	Brand(ctx context.Context, brandID string) (tally.Brand, error)
}

// New returns the Service over db, writing through events.
func New(db *records.DB, events *outbox.Writer, b brands) *Service {
	return &Service{db: db, events: events, brands: b}
}

// ApplicationInput is the body of the public partner application form.
type ApplicationInput struct {
	Name    *string `json:"name"`
	Email   *string `json:"email"`
	Website *string `json:"website"`
	Message *string `json:"message"`
}

func (in ApplicationInput) checks() []error {
	return []error{
		validate.Text("name", in.Name, true, 200),
		validate.Email("email", in.Email),
		validate.HTTPURL("website", in.Website, false),
		validate.Paragraph("message", in.Message, false, 2000),
	}
}

// FieldErrors checks every field of an application and maps each field
// with a problem to its message (the application page shows them all).
func (in ApplicationInput) FieldErrors() map[string]string {
	return validate.FieldErrors(in.checks()...)
}

// Apply records a partner application for the brand and emits partner.applied.
// One e-mail address applies once per brand; a second application answers 409.
func (s *Service) Apply(ctx context.Context, brandID string, in ApplicationInput) (tally.Partner, error) {
	if err := validate.First(in.checks()...); err != nil {
		return tally.Partner{}, err
	}
	if _, err := s.brands.Brand(ctx, brandID); err != nil {
		return tally.Partner{}, err
	}
	now := s.db.Now()
	p := tally.Partner{
		ID:        ids.New("prt_", now),
		BrandID:   brandID,
		Name:      strings.TrimSpace(*in.Name),
		Email:     *in.Email,
		Website:   validate.Deref(in.Website, ""),
		Message:   validate.Deref(in.Message, ""),
		Status:    tally.PartnerApplied,
		CreatedAt: tally.NewTime(now),
		UpdatedAt: tally.NewTime(now),
	}
	evt, err := s.events.Event(brandID, tally.EventPartnerApplied, EventData(p, ""), now)
	if err != nil {
		return tally.Partner{}, err
	}
	err = s.events.Transact(ctx,
		store.Put(Item(p), store.NotExists()),
		store.Put(store.Item{Key: keys.PartnerEmail(brandID, strings.ToLower(p.Email)), Data: records.MustJSON(p.ID)}, store.NotExists()),
		evt,
	)
	if i, failed := store.FailedOp(err); failed && i == 1 {
		e := tally.Errorf(tally.ECodeConflict, "An application with this email already exists for this brand.")
		e.Field = "email"
		return tally.Partner{}, e
	}
	return p, err
}

func Item(p tally.Partner) store.Item {
	return store.Item{Key: keys.Partner(p.BrandID, p.ID), Attrs: map[string]string{"status": p.Status}, Data: records.MustJSON(p)}
}

func EventData(p tally.Partner, previous string) tally.PartnerEventData {
	return tally.PartnerEventData{PartnerID: p.ID, Name: p.Name, Email: p.Email, Status: p.Status, PreviousStatus: previous}
}

// Partner returns one of the brand's partners.
func (s *Service) Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error) {
	if !ids.Valid("prt_", partnerID) {
		return tally.Partner{}, records.NotFound(store.ErrNotFound, "partner", partnerID)
	}
	p, err := records.Get[tally.Partner](ctx, s.db, keys.Partner(brandID, partnerID))
	return p, records.NotFound(err, "partner", partnerID)
}

// Partners lists the brand's partners, newest first, optionally only those
// with the given status.
func (s *Service) Partners(ctx context.Context, brandID, status string, p records.ListParams) ([]tally.Partner, string, error) {
	if err := validate.OneOf("status", &status, "", tally.PartnerApplied, tally.PartnerActive, tally.PartnerRejected, tally.PartnerBanned); err != nil {
		return nil, "", err
	}
	sp := records.Span{Parts: []records.Partition{{PK: keys.BrandPK(brandID)}}, Prefix: keys.PartnerSKPrefix, Filter: status}
	var keep func(*tally.Partner) bool
	if status != "" {
		keep = func(p *tally.Partner) bool { return p.Status == status }
	}
	return records.ListSpan(ctx, s.db, sp, p, keep)
}

// partnerTransitions says, for each action, which states it leaves from, where
// it goes and what it emits.
var partnerTransitions = map[string]struct {
	from  []string
	to    string
	event string
}{
	"approve":    {[]string{tally.PartnerApplied}, tally.PartnerActive, tally.EventPartnerApproved},
	"reject":     {[]string{tally.PartnerApplied}, tally.PartnerRejected, tally.EventPartnerRejected},
	"ban":        {[]string{tally.PartnerApplied, tally.PartnerActive, tally.PartnerRejected}, tally.PartnerBanned, tally.EventPartnerBanned},
	"reactivate": {[]string{tally.PartnerRejected, tally.PartnerBanned}, tally.PartnerActive, tally.EventPartnerReactivated},
}

// ApprovePartner moves an applied partner to active.
func (s *Service) ApprovePartner(ctx context.Context, brandID, partnerID string) (tally.Partner, error) {
	return s.transitionPartner(ctx, brandID, partnerID, "approve")
}

// RejectPartner turns an application down.
func (s *Service) RejectPartner(ctx context.Context, brandID, partnerID string) (tally.Partner, error) {
	return s.transitionPartner(ctx, brandID, partnerID, "reject")
}

// BanPartner bans a partner in any state; conversions for it stop being accepted.
func (s *Service) BanPartner(ctx context.Context, brandID, partnerID string) (tally.Partner, error) {
	return s.transitionPartner(ctx, brandID, partnerID, "ban")
}

// ReactivatePartner reinstates a rejected or banned partner: it is active
// again. The auto-ban rule's count of its high-risk clicks starts over,
// so that the next high-risk click does not ban it at once.
func (s *Service) ReactivatePartner(ctx context.Context, brandID, partnerID string) (tally.Partner, error) {
	return s.transitionPartner(ctx, brandID, partnerID, "reactivate")
}

// forgetHighRiskClicks deletes the counters of a partner's high-risk
// clicks that the auto-ban rule reads. It runs while the partner is not
// active, when no click adds to them (clicks of a partner that is not
// active are refused in their own transaction).
func (s *Service) forgetHighRiskClicks(ctx context.Context, brandID, partnerID string) error {
	q := store.Query{PK: keys.HighRiskPK(brandID, partnerID), Limit: store.MaxTransactOps}
	for {
		page, err := s.db.Query(ctx, q)
		if err != nil || len(page.Items) == 0 {
			return err
		}
		ops := make([]store.Op, 0, len(page.Items))
		for _, it := range page.Items {
			ops = append(ops, store.Delete(it.Key))
		}
		if err := s.db.Transact(ctx, ops...); err != nil {
			return err
		}
		q.Cursor = "" // the deleted are gone: read the partition from its start again
	}
}

// transitionPartner applies an action with optimistic concurrency: the write
// holds only if the status is still the one read, so of two racing actions
// exactly one takes effect and emits its event.
func (s *Service) transitionPartner(ctx context.Context, brandID, partnerID, action string) (tally.Partner, error) {
	t := partnerTransitions[action]
	for {
		p, err := s.Partner(ctx, brandID, partnerID)
		if err != nil {
			return tally.Partner{}, err
		}
		allowed := false
		for _, from := range t.from {
			allowed = allowed || p.Status == from
		}
		if !allowed {
			return tally.Partner{}, tally.Errorf(tally.ECodeInvalidTransition, "Cannot %s a partner whose status is %q.", action, p.Status)
		}
		previous := p.Status
		if action == "reactivate" && previous == tally.PartnerBanned {
			if err := s.forgetHighRiskClicks(ctx, brandID, partnerID); err != nil {
				return tally.Partner{}, err
			}
		}
		now := s.db.Now()
		p.Status, p.UpdatedAt = t.to, tally.NewTime(now)
		data := EventData(p, previous)
		if action == "ban" {
			data.Reason = tally.BanManual
		}
		evt, err := s.events.Event(brandID, t.event, data, now)
		if err != nil {
			return tally.Partner{}, err
		}
		err = s.events.Transact(ctx, append([]store.Op{store.Put(Item(p), store.AttrEquals("status", previous)), evt},
			audit.Record(ctx, brandID, t.event, p.ID, p.Name+" ("+p.Email+"): "+previous+" → "+p.Status, now)...)...)
		if _, failed := store.FailedOp(err); failed {
			continue // changed under us: decide again on the new status
		}
		return p, err
	}
}
