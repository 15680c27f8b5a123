package conversions

import (
	"context"
	crand "crypto/rand"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// How an approval run spreads its work: approveWorkers approvals at once
// (each a transaction of its own), over approveShardsAtOnce hold-queue
// shards at once. Fewer shards than keys.QueueShards, so that runs that
// overlap while a backlog lasts each drain shards of their own
// (docs/aws.md, "Capacity").
const (
	approveWorkers      = 64
	approveShardsAtOnce = 8
)

// leaseWithoutDeadline is how long a run without a deadline (the local
// server's) holds a shard. Holding it longer than that is harmless: a run
// that takes the shard meanwhile approves only what is still pending.
const leaseWithoutDeadline = 10 * time.Minute

// ApprovalRun is what one approval run did.
type ApprovalRun struct {
	// Approved counts the conversions this run approved.
	Approved int
	// Unfinished counts the shards this run held that still had due
	// conversions when its deadline came; a later or overlapping run
	// goes on with them.
	Unfinished int
	// Busy counts the shards another run held when this one came to them.
	Busy int
}

// ApproveDue approves every pending conversion whose hold time has elapsed,
// across all brands, and returns how many it approved. It is ApproveDueBy
// without a deadline: the local server's job, which runs until it is done.
func (s *Service) ApproveDue(ctx context.Context) (int, error) {
	run, err := s.ApproveDueBy(ctx, time.Time{})
	return run.Approved, err
}

// ApproveDueBy approves pending conversions whose hold time has elapsed,
// across all brands, until it has drained every hold-queue shard or the
// deadline (zero: none) has passed, when it starts no further page.
//
// It drains approveShardsAtOnce shards at once, each after taking its
// lease (an item whose "until" says when the holder's deadline ends), and
// skips shards another run holds: runs that overlap share a backlog
// rather than racing through the same pages. Approving twice is still
// safe, since each approval is conditional: a conversion approved by
// another run counts for that one only.
func (s *Service) ApproveDueBy(ctx context.Context, deadline time.Time) (ApprovalRun, error) {
	upTo := keys.HoldQueueUpTo(s.db.Now())
	lease := shardLease{db: s.db, owner: crand.Text(), until: deadline}
	if deadline.IsZero() {
		lease.until = time.Now().Add(leaseWithoutDeadline)
	}
	var (
		approved, unfinished, busy atomic.Int64
		slots                      = make(chan struct{}, approveWorkers)
		shards                     = make(chan int)
		errs                       = make([]error, keys.QueueShards)
		wg                         sync.WaitGroup
	)
	for range approveShardsAtOnce {
		wg.Go(func() {
			for shard := range shards {
				held, err := lease.take(ctx, shard)
				switch {
				case err != nil:
					errs[shard] = err
					continue
				case !held:
					busy.Add(1)
					continue
				}
				done, err := s.approveShard(ctx, shard, upTo, deadline, slots, &approved)
				errs[shard] = errors.Join(err, lease.release(ctx, shard))
				if !done {
					unfinished.Add(1)
				}
			}
		})
	}
	// In random order, so that runs that start together begin apart.
	for _, shard := range rand.Perm(keys.QueueShards) {
		shards <- shard
	}
	close(shards)
	wg.Wait()
	run := ApprovalRun{Approved: int(approved.Load()), Unfinished: int(unfinished.Load()), Busy: int(busy.Load())}
	return run, errors.Join(errs...)
}

// approveShard approves the due conversions of one hold-queue shard, a
// page at a time, each approval taking a slot, until the shard is drained
// (done) or the deadline has passed.
func (s *Service) approveShard(ctx context.Context, shard int, upTo string, deadline time.Time, slots chan struct{}, approved *atomic.Int64) (done bool, err error) {
	q := store.Query{Index: store.GSI3, PK: keys.HoldQueuePK(shard), SKTo: upTo, Limit: 100}
	for {
		if !deadline.IsZero() && time.Now().After(deadline) {
			return false, nil
		}
		page, err := s.db.Query(ctx, q)
		if err != nil {
			return false, err
		}
		var (
			wg   sync.WaitGroup
			errs = make([]error, len(page.Items))
		)
		for i, it := range page.Items {
			slots <- struct{}{} // a goroutine per free slot, not per item
			wg.Go(func() {
				defer func() { <-slots }()
				var c tally.Conversion
				if errs[i] = records.Decode(it, &c); errs[i] != nil {
					return
				}
				_, err := s.decideConversion(ctx, c.BrandID, c.ID, tally.ConversionApproved, "hold_elapsed")
				switch {
				case err == nil:
					approved.Add(1)
				case tally.ErrorCode(err) != tally.ECodeInvalidTransition:
					errs[i] = err
				}
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return false, err
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			return true, nil
		}
	}
}

// shardLease takes and gives back hold-queue shards for one run (owner)
// until its deadline. A lease whose holder died ends at that deadline.
type shardLease struct {
	db    store.Store
	owner string
	until time.Time
}

// take holds the shard for the run unless another run's lease is current.
func (l shardLease) take(ctx context.Context, shard int) (bool, error) {
	err := l.db.Transact(ctx, store.Put(l.item(shard, l.until), store.NumLess("until", time.Now().UnixMilli())))
	if _, taken := store.FailedOp(err); taken {
		return false, nil
	}
	return err == nil, err
}

// release ends the run's lease of the shard, unless another run took it
// since (the lease had ended).
func (l shardLease) release(ctx context.Context, shard int) error {
	err := l.db.Transact(ctx, store.Put(l.item(shard, time.Time{}), store.AttrEquals("owner", l.owner)))
	if _, lost := store.FailedOp(err); lost {
		return nil
	}
	return err
}

func (l shardLease) item(shard int, until time.Time) store.Item {
	var ms int64
	if !until.IsZero() {
		ms = until.UnixMilli()
	}
	return store.Item{Key: keys.HoldLease(shard), Attrs: map[string]string{"owner": l.owner}, Nums: map[string]int64{"until": ms}}
}
