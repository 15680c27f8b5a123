package bolt

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/store"
)

// Writes that share a commit stay independent: one whose condition fails
// is refused and changes nothing, the others in its round are committed.
func TestGroupCommitKeepsWritesApart(t *testing.T) {
	s := openTest(t, filepath.Join(t.TempDir(), "tally.db"), time.Hour)
	ctx := t.Context()
	counter := store.Key{PK: "counter", SK: "n"}
	const writers = 200
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for i := range writers {
		wg.Go(func() {
			// Each puts an item of its own and adds 1 to a counter capped
			// at 150: the last 50 conditions fail.
			errs[i] = s.Transact(ctx,
				store.Put(store.Item{Key: store.Key{PK: fmt.Sprint("item-", i), SK: "x"}, Data: []byte("v")}),
				store.Increment(counter, map[string]int64{"n": 1}, store.NumLess("n", 150)))
		})
	}
	wg.Wait()
	ok, refused := 0, 0
	for i, err := range errs {
		_, getErr := s.Get(ctx, store.Key{PK: fmt.Sprint("item-", i), SK: "x"})
		switch i, failed := store.FailedOp(err); {
		case err == nil && getErr == nil:
			ok++
		case failed && i == 1 && errors.Is(getErr, store.ErrNotFound):
			refused++
		default:
			t.Errorf("write %d: %v, item read: %v", i, err, getErr)
		}
	}
	it, err := s.Get(ctx, counter)
	if err != nil || it.Nums["n"] != 150 || ok != 150 || refused != 50 {
		t.Errorf("counter %v (%v); %d writes committed, %d refused; want 150 and 50", it.Nums, err, ok, refused)
	}
	// A write refused for an int64 overflow changes nothing either; a write
	// at the same moment is committed.
	big := store.Key{PK: "big", SK: "n"}
	if err := s.Transact(ctx, store.Increment(big, map[string]int64{"n": 1<<63 - 1})); err != nil {
		t.Fatal(err)
	}
	var overflow, fine error
	wg.Go(func() { overflow = s.Transact(ctx, store.Increment(big, map[string]int64{"n": 1})) })
	wg.Go(func() {
		fine = s.Transact(ctx, store.Put(store.Item{Key: store.Key{PK: "fine", SK: "x"}, Data: []byte("v")}))
	})
	wg.Wait()
	if _, err := s.Get(ctx, store.Key{PK: "fine", SK: "x"}); overflow == nil || fine != nil || err != nil {
		t.Errorf("overflow: %v; the other write: %v, read %v", overflow, fine, err)
	}
}

func TestWriteAfterClose(t *testing.T) {
	s, err := open(filepath.Join(t.TempDir(), "tally.db"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	err = s.Transact(t.Context(), store.Put(store.Item{Key: store.Key{PK: "a", SK: "b"}}))
	if !errors.Is(err, ErrClosed) {
		t.Errorf("Transact after Close: %v, want ErrClosed", err)
	}
}
