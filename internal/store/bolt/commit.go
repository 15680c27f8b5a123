package bolt

import (
	"context"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// Group commit. A commit costs two fsyncs, whatever it holds, so writes
// share commits: one goroutine, the committer, makes every write. It takes
// the first write that comes, applies it to the round's overlay (see
// round), and as long as other writes are waiting applies them too, in
// order; when none is left it puts the overlay into a bbolt transaction
// and commits. Writes that come during the commit wait for the next round,
// which starts the moment this one has committed; writes that come while
// the round is still applying join it, rather than wait a whole round. A
// lone write commits at once. No write waits on a timer.
//
// A write whose conditions fail changes nothing (plan writes nothing), so
// it is answered with its error and the others go on. Should putting the
// overlay into bbolt fail, the round is rolled back and every write of it
// done again alone, in order, so that only the failing one fails.

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
			s.commit(w)
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

// commit applies a round of writes, first and the writes that come
// meanwhile, in one transaction, and answers each.
func (s *Store) commit(first *pendingWrite) {
	round := []*pendingWrite{first}
	flushed, err := s.apply(&round, true)
	if !flushed && len(round) > 1 {
		for _, w := range round {
			alone := []*pendingWrite{w}
			_, err := s.apply(&alone, false)
			answer(alone, err)
		}
		return
	}
	answer(round, err)
}

// apply plans and performs the writes of round (and, when more, those that
// come meanwhile) in one transaction and commits it. flushed is false when
// putting the round's overlay into bbolt failed.
func (s *Store) apply(round *[]*pendingWrite, more bool) (flushed bool, err error) {
	err = s.db.Update(func(tx *bbolt.Tx) error {
		r := newRound(tx)
		for i := 0; i < len(*round) || (more && s.waiting(round)); i++ {
			w := (*round)[i]
			w.item, w.err = store.Item{}, nil
			if err := r.plan(w.steps); err != nil {
				w.err = err // nothing written
				continue
			}
			w.item = r.perform(w.steps)
		}
		flushed = true
		if err := r.flush(); err != nil {
			flushed = false
			return err
		}
		return nil
	})
	return flushed, err
}

// answer tells the writes of a round how it went: err is the commit's.
func answer(round []*pendingWrite, err error) {
	for _, w := range round {
		if err != nil && w.err == nil {
			w.item, w.err = store.Item{}, err // nothing of the round is stored
		}
		close(w.done)
	}
}
