package kv

import (
	"errors"

	"github.com/tally-hq/tally/internal/store"
)

// What the tests of both engines (package kv_test) reach inside.

const SweepBatch = sweepBatch

func (s *Store) Sweep(now int64) error { return s.sweep(now) }

// SweepDone is closed when the sweep has ended.
func (s *Store) SweepDone() <-chan struct{} { return s.done }

// ApplyRolledBack does what the committer does for a round of writes,
// prepare, plan and perform each and flush the overlay, then rolls the
// transaction back instead of committing it.
func (s *Store) ApplyRolledBack(writes [][]store.Op) error {
	steps := make([][]step, len(writes))
	for i, ops := range writes {
		var err error
		if steps[i], err = prepare(ops); err != nil {
			return err
		}
	}
	errRollback := errors.New("rollback")
	err := s.db.Update(func(tx Tx) error {
		r := newRound(tx)
		for _, st := range steps {
			if err := r.plan(st); err != nil {
				return err
			}
			r.perform(st)
		}
		if err := r.flush(); err != nil {
			return err
		}
		return errRollback
	})
	if !errors.Is(err, errRollback) {
		return err
	}
	return nil
}
