package bolt

import (
	"fmt"

	"go.etcd.io/bbolt"

	"github.com/tally-hq/tally/internal/store"
)

// A round's writes go through an overlay of the items they touch, and the
// overlay goes into bbolt once, when the round is about to commit: a
// counter that thirty clicks of a round add to (a rollup, a cap) is read,
// decoded, encoded and put once instead of thirty times, and an offer that
// each of them checks is read once. Every write of the round sees the
// writes before it in the overlay, as it would in bbolt, so the outcome is
// the same; the committer is what pays for each write, one after another.
type round struct {
	tx      *bbolt.Tx
	entries map[string]*entry
	order   []*entry // in the order first touched, so writes go in deterministically
	free    []entry  // entries allocated ahead, a chunk at a time
}

// entry is an item as the round found it in bbolt and as its writes leave
// it so far.
type entry struct {
	key    []byte
	was    store.Item // as committed; its index and TTL entries are in bbolt
	wasOK  bool
	read   parts // what was read of was
	is     store.Item
	exists bool
	val    []byte // is, encoded, when a put prepared it
	dirty  bool   // written by the round
}

func newRound(tx *bbolt.Tx) *round {
	return &round{tx: tx, entries: make(map[string]*entry)}
}

// entry returns the overlay's entry for the item at items bucket key key,
// with at least the parts want of it read.
func (r *round) entry(key []byte, k store.Key, want parts) (*entry, error) {
	e := r.entries[string(key)]
	if e != nil && (e.dirty || e.read&want == want) {
		return e, nil // a written entry is whole: a put's item, or an update of an item read whole
	}
	if e == nil {
		// A round touches tens of items: allocating their entries a chunk
		// at a time saves an allocation each (1.4 % of a click's).
		if len(r.free) == 0 {
			r.free = make([]entry, 16)
		}
		e, r.free = &r.free[0], r.free[1:]
		e.key = key
		r.entries[string(key)] = e
		r.order = append(r.order, e)
	}
	want |= e.read
	it, ok, err := load(r.tx, key, k, want)
	if err != nil {
		return nil, err
	}
	e.was, e.wasOK, e.read, e.is, e.exists = it, ok, want, it, ok
	return e, nil
}

// plan reads the items of steps, checks every condition and works out what
// each update writes, changing nothing: an error here leaves the round as
// it was.
func (r *round) plan(steps []step) error {
	for i := range steps {
		st := &steps[i]
		op := st.op
		e, err := r.entry(st.key, op.Target(), partsFor(op.Kind))
		if err != nil {
			return err
		}
		for _, c := range op.Conds {
			if !holds(c, e.is, e.exists) {
				return &store.ConditionFailedError{Index: i}
			}
		}
		st.entry = e
		switch op.Kind {
		case store.OpPut:
			st.next = op.Item
		case store.OpUpdate:
			if st.next, err = updated(e.is, e.exists, *op); err != nil {
				return err
			}
		}
	}
	return nil
}

// perform applies planned steps to the overlay. It returns the item written
// by the last step when that is an update, for Update.
func (r *round) perform(steps []step) store.Item {
	var last store.Item
	for i := range steps {
		st := &steps[i]
		e := st.entry
		last = store.Item{}
		switch st.op.Kind {
		case store.OpPut:
			e.is, e.exists, e.val, e.dirty = st.next, true, st.val, true
		case store.OpUpdate:
			e.is, e.exists, e.val, e.dirty = st.next, true, nil, true
			last = st.next
		case store.OpDelete:
			e.is, e.exists, e.val, e.dirty = store.Item{}, false, nil, true
		}
	}
	return last
}

// flush writes the overlay's changed items, with their index and TTL
// entries, into the round's transaction.
func (r *round) flush() error {
	for _, e := range r.order {
		switch {
		case !e.dirty:
		case e.exists:
			v := e.val
			if v == nil {
				var err error
				if v, err = encode(e.is); err != nil {
					return fmt.Errorf("bolt: encode item: %w", err)
				}
			}
			if err := write(r.tx, e.key, e.was, e.is, v); err != nil { // e.was is zero when !e.wasOK
				return err
			}
		case e.wasOK:
			if err := remove(r.tx, e.key, e.was); err != nil {
				return err
			}
		}
	}
	return nil
}
