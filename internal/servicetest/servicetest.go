// Package servicetest makes the services of tests: service.New with the
// layout a deployment on that store has, service.ForDynamoDB on DynamoDB
// (what lambdafn and `tally serve` with TALLY_TABLE choose).
package servicetest

import (
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/store/dynamo"
)

// New returns service.New(st, opts...), laid out for st's backend.
func New(st store.Store, opts ...service.Option) *service.Service {
	if _, ok := st.(*dynamo.Store); ok {
		opts = append([]service.Option{service.ForDynamoDB()}, opts...)
	}
	return service.New(st, opts...)
}
