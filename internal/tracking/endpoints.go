package tracking

import (
	"context"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/endpoints"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

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
	if _, err := s.endpointsService.SubscriptionRecord(ctx, brandID, subscriptionID); err != nil {
		return Recovery{}, err
	}
	return s.recoverEndpoint(ctx, brandID, subscriptionID, keys.Subscription(brandID, subscriptionID), in)
}

// RecoverPostback is RecoverSubscription for a partner's postback.
func (s *Service) RecoverPostback(ctx context.Context, brandID, partnerID string, in RecoverInput) (Recovery, error) {
	if _, err := s.endpointsService.PostbackRecord(ctx, brandID, partnerID); err != nil {
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
	if endpoints.HealthOf(it).Status == tally.EndpointDisabled {
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
