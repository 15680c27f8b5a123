package tracking

import "github.com/tally-hq/tally/internal/outbox"

// WithOutboxOnlyForEndpoints writes the events of a brand that has never
// had a webhook subscription or a partner postback without their outbox
// entry (outbox.OnlyForEndpoints).
func WithOutboxOnlyForEndpoints() Option {
	return func(s *Service) { s.queue = &outbox.OnlyForEndpoints{} }
}
