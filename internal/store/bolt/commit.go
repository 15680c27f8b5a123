package bolt

import (
	"context"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// Group commit. A commit costs two fsyncs, whatever it holds, so writes
// share commits: one goroutine, the committer, makes every write. It takes
// the first write that comes and every other already waiting, applies them
// in order in one bbolt transaction and commits; writes that come
// meanwhile wait for the next round, which starts the moment this one has
// committed. A lone write commits at once; under load, a round holds what
// arrived during the previous commit. No write waits on a timer.
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
		var round []*pendingWrite
		select {
		case w := <-s.writes:
			round = append(round, w)
		case <-s.stop:
			return
		}
	more:
		for len(round) < maxRound {
			select {
			case w := <-s.writes:
				round = append(round, w)
			default:
				break more
			}
		}
		s.commit(round)
	}
}

// commit applies a round of writes in one transaction and answers each.
func (s *Store) commit(round []*pendingWrite) {
	for len(round) > 0 {
		var dirty *pendingWrite // the write that failed while writing
		err := s.db.Update(func(tx *bbolt.Tx) error {
			for _, w := range round {
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
