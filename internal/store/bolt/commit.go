package bolt

import (
	"context"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// Group commit. A commit costs two fsyncs, whatever it holds, so writes
// share commits: one goroutine, the committer, makes every write. It takes
// the first write that comes, applies it in a bbolt transaction, and as long
// as other writes are waiting applies them too, in order; when none is
// left it commits. Writes that come during the commit wait for the next
// round, which starts the moment this one has committed; writes that come
// while the round is still applying join it, rather than wait a whole
// round. A lone write commits at once. No write waits on a timer.
//
// A write whose conditions fail changes nothing (plan writes nothing), so
// it is answered with its error and the others go on. A write that fails
// while writing leaves the transaction dirty: the round is rolled back and
// done again without it, and it runs alone.

// maxRound bounds the writes of one commit, so that a round under heavy
// load does not grow without end.
const maxRound = 1000

type pendingWrite struct {
	steps []step
	item  store.Item // after the last op, when it is an update
	err   error
	done  chan struct{}
}

// write prepares ops, hands them to the committer and waits for their
// commit.
func (s *Store) write(ctx context.Context, ops []store.Op) (store.Item, error) {
	steps, err := prepare(ops)
	if err != nil {
		return store.Item{}, err
	}
	w := &pendingWrite{steps: steps, done: make(chan struct{})}
	select {
	case s.writes <- w:
	case <-s.stop:
		return store.Item{}, ErrClosed
	case <-ctx.Done():
		return store.Item{}, ctx.Err() // not taken: nothing written
	}
	<-w.done // taken: it will be committed or refused, whatever ctx says now
	return w.item, w.err
}

func (s *Store) committer() {
	defer close(s.committed)
	for {
		select {
		case w := <-s.writes:
			s.commit([]*pendingWrite{w})
		case <-s.stop:
			return
		}
	}
}

// waiting adds a write that is waiting to round, if there is one and round
// has room.
func (s *Store) waiting(round *[]*pendingWrite) bool {
	if len(*round) >= maxRound {
		return false
	}
	select {
	case w := <-s.writes:
		*round = append(*round, w)
		return true
	default:
		return false
	}
}

// commit applies a round of writes in one transaction, with the writes that
// come meanwhile, and answers each.
func (s *Store) commit(round []*pendingWrite) {
	for len(round) > 0 {
		var dirty *pendingWrite // the write that failed while writing
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for i := 0; i < len(round) || s.waiting(&round); i++ {
				w := round[i]
				if err := plan(tx, w.steps); err != nil {
					w.item, w.err = store.Item{}, err // nothing written
					continue
				}
				if w.item, w.err = perform(tx, w.steps); w.err != nil {
					dirty = w
					return w.err
				}
			}
			return nil
		})
		if dirty == nil {
			for _, w := range round {
				if err != nil && w.err == nil {
					w.err = err // the commit itself failed: nothing of the round is stored
				}
				close(w.done)
			}
			return
		}
		// Roll back the round; the failing write runs alone, the rest again.
		rest := round[:0:0]
		for _, w := range round {
			if w != dirty {
				rest = append(rest, w)
			}
		}
		var item store.Item
		err = s.db.Update(func(tx *bbolt.Tx) error {
			err := plan(tx, dirty.steps)
			if err == nil {
				item, err = perform(tx, dirty.steps)
			}
			return err
		})
		if err != nil {
			item = store.Item{}
		}
		dirty.item, dirty.err = item, err
		close(dirty.done)
		round = rest
	}
}
