package endpoints

import (
	"compress/flate"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
)

// Answers compresses the receivers' answers against what their endpoint
// answered before: a receiver tends to answer alike (the same page, the
// same JSON with other ids), so an answer compressed with an earlier one
// as DEFLATE's preset dictionary takes a few bytes to a few hundred, where
// alone it takes half its length or more.
//
// Each endpoint has a dictionary a week (keys.AnswerDictionary): the first
// answer of at least minDictionaryAnswer bytes it gives that week, written
// once (a conditional put: of two processes that both find it missing, one
// writes it and the other reads it) and never changed, so that every
// process may keep it (Answers caches what it read). A delivery's answer
// says which week's dictionary it was compressed against. A dictionary
// outlives the deliveries that use it: it expires dictionaryMargin after
// the last delivery written that week can, and a delivery written again
// (an attempt, a manual retry) compresses again the answers whose
// dictionary would go less than a week after it. Shorter answers are
// compressed alone, and read no dictionary.
type Answers struct {
	db   *records.DB
	keep time.Duration

	mu    sync.Mutex
	dicts map[store.Key]*loading
}

// loading is a dictionary being read or written, or read: the attempts of
// a batch that all find it missing wait for one read (and write) of it.
type loading struct {
	done chan struct{}
	d    *dictionary
	err  error
}

const (
	dictionaryWeek        = 7 * 24 * time.Hour
	dictionaryMargin      = 2 * dictionaryWeek
	minDictionaryAnswer   = 256
	maxCachedDictionaries = 1024
)

// AnswerUnavailable is the answer the log shows for an attempt whose
// dictionary is gone (a delivery read after its expiry, before the table's
// TTL took it).
const AnswerUnavailable = "[This answer is no longer available.]"

// dictionary is an endpoint's dictionary of a week, with compressors that
// start from it.
type dictionary struct {
	text    []byte
	writers sync.Pool
}

func newDictionary(text []byte) *dictionary {
	d := &dictionary{text: text}
	d.writers.New = func() any {
		w, _ := flate.NewWriterDict(nil, flate.BestCompression, text) // a valid level: no error
		return w
	}
	return d
}

// NewAnswers returns the answers of deliveries kept keep after their last
// change, stored in db.
func NewAnswers(db *records.DB, keep time.Duration) *Answers {
	return &Answers{db: db, keep: keep, dicts: map[store.Key]*loading{}}
}

// weekOf numbers the week t falls in.
func weekOf(t time.Time) int64 { return t.Unix() / int64(dictionaryWeek/time.Second) }

// expiry is when the dictionary of week w expires: after every delivery
// written that week, by dictionaryMargin.
func (a *Answers) expiry(w int64) time.Time {
	return time.Unix((w+1)*int64(dictionaryWeek/time.Second), 0).Add(a.keep + dictionaryMargin)
}

// Item is rec's stored item (DeliveryItem), its new answers compressed
// against their endpoint's dictionary of this week, and the answers whose
// dictionary would expire less than a week after the delivery compressed
// again. When a dictionary cannot be read or written, answers are
// compressed alone: the delivery is written all the same.
func (a *Answers) Item(ctx context.Context, rec DeliveryRecord) store.Item {
	now := a.db.Now()
	packed := make([]packedAnswer, len(rec.Attempts))
	for i, at := range rec.Attempts {
		if i < len(rec.packed) {
			p := rec.packed[i]
			if p.form != answerAgainst || !a.expiry(p.week).Before(rec.UpdatedAt.Add(a.keep+dictionaryWeek)) {
				packed[i] = p
				continue
			}
			text, ok, err := a.text(ctx, rec, p)
			if err != nil || !ok {
				packed[i] = p
				continue
			}
			at.Response = text
		}
		packed[i] = a.pack(ctx, rec, weekOf(now), at.Response)
	}
	return deliveryItem(rec, a.keep, packed)
}

// pack is answer packed against rec's endpoint's dictionary of week w,
// made of answer when there is none.
func (a *Answers) pack(ctx context.Context, rec DeliveryRecord, w int64, answer string) packedAnswer {
	if len(answer) < minDictionaryAnswer {
		return packNoDictionary(answer)
	}
	d, err := a.dictionary(ctx, rec, w, answer)
	if err != nil {
		return packNoDictionary(answer)
	}
	return pack(answer, &d.writers, answerAgainst, w)
}

// Show puts in rec's attempts the answers compressed against a dictionary
// (FromItem leaves them out): AnswerUnavailable for one whose dictionary
// is gone.
func (a *Answers) Show(ctx context.Context, rec *DeliveryRecord) error {
	for i, p := range rec.packed {
		if p.form != answerAgainst || i >= len(rec.Attempts) {
			continue
		}
		text, ok, err := a.text(ctx, *rec, p)
		if err != nil {
			return err
		}
		if !ok {
			text = AnswerUnavailable
		}
		rec.Attempts[i].Response = text
	}
	return nil
}

// text is the answer p of rec; ok is false when its dictionary is gone or
// it does not inflate.
func (a *Answers) text(ctx context.Context, rec DeliveryRecord, p packedAnswer) (text string, ok bool, err error) {
	d, err := a.dictionary(ctx, rec, p.week, "")
	if errors.Is(err, store.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	text, err = p.text(d.text)
	return text, err == nil, nil
}

// dictionary is rec's endpoint's dictionary of week w; when there is none
// and create is not empty, create becomes it, unless another process wrote
// one first. Without either it is store.ErrNotFound.
func (a *Answers) dictionary(ctx context.Context, rec DeliveryRecord, w int64, create string) (*dictionary, error) {
	k := keys.AnswerDictionary(rec.BrandID, rec.EndpointID(), w)
	for {
		a.mu.Lock()
		l, found := a.dicts[k]
		if !found {
			if len(a.dicts) >= maxCachedDictionaries {
				clear(a.dicts)
			}
			l = &loading{done: make(chan struct{})}
			a.dicts[k] = l
		}
		a.mu.Unlock()
		if !found {
			l.d, l.err = a.load(ctx, k, w, create)
			if l.err != nil {
				a.mu.Lock()
				if a.dicts[k] == l {
					delete(a.dicts, k) // read again next time
				}
				a.mu.Unlock()
			}
			close(l.done)
			return l.d, l.err
		}
		select {
		case <-l.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		// A reader found none, where this caller would write it.
		if !errors.Is(l.err, store.ErrNotFound) || create == "" {
			return l.d, l.err
		}
	}
}

// load reads the dictionary at k, of week w, or writes create as it
// (dictionary).
func (a *Answers) load(ctx context.Context, k store.Key, w int64, create string) (*dictionary, error) {
	it, err := a.db.Get(ctx, k)
	if errors.Is(err, store.ErrNotFound) && create != "" {
		it = store.Item{Key: k, Data: []byte(create), ExpiresAt: a.expiry(w).Unix()}
		err = a.db.Transact(ctx, store.Put(it, store.NotExists()))
		if _, lost := store.FailedOp(err); lost {
			it, err = a.db.Get(ctx, k)
		}
	}
	if err != nil {
		return nil, err
	}
	return newDictionary(it.Data), nil
}
