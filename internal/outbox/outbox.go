// Package outbox writes the events of Tally's changes in the same
// transaction as the changes themselves, so that a change is never stored
// without its event nor an event without its change. The webhook engine
// takes them from there; nothing here knows how they are delivered.
package outbox

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/jsonenc"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/trace"
)

// EventRetention is how long event items stay in the table at least; each
// delivery attempt reads the envelope from its event, so events stay as
// long as deliveries do when that is longer (Keep).
const EventRetention = 30 * 24 * time.Hour

// Keep is how long an event stays when deliveries stay deliveryRetention.
func Keep(deliveryRetention time.Duration) time.Duration {
	return max(EventRetention, deliveryRetention)
}

// Writer writes transactions, the events among their operations included.
type Writer struct {
	db    *records.DB
	keep  time.Duration
	queue Queue
	// notify is told the events a transaction put into the outbox (the
	// local pipeline fans them out at once); nil when nothing listens.
	notify func(eventIDs []string)
}

// NewWriter returns a Writer over db whose events stay as long as
// deliveries that stay deliveryRetention, enter the outbox as queue says,
// and are announced to notify (nil: to nobody) once written.
func NewWriter(db *records.DB, deliveryRetention time.Duration, queue Queue, notify func(eventIDs []string)) *Writer {
	return &Writer{db: db, keep: Keep(deliveryRetention), queue: queue, notify: notify}
}

// envelope is a tally.Event whose data is not yet JSON, so that Event
// marshals the event in one pass: data marshalled first and put in as a
// json.RawMessage would be checked and compacted again.
type envelope struct {
	ID        string     `json:"id"`
	Event     string     `json:"event"`
	CreatedAt tally.Time `json:"createdAt"`
	BrandID   string     `json:"brandId"`
	Data      any        `json:"data"`
}

// marshal is json.Marshal(e), without reflection for the data of the
// events on the request paths (conversion.created is one per conversion).
func (e *envelope) marshal() ([]byte, error) {
	d, ok := e.Data.(tally.ConversionEventData)
	if !ok {
		return json.Marshal(e)
	}
	b := make([]byte, 0, 512)
	b = append(b, `{"id":`...)
	b = jsonenc.String(b, e.ID, jsonenc.EscapeHTML)
	b = append(b, `,"event":`...)
	b = jsonenc.String(b, e.Event, jsonenc.EscapeHTML)
	b = append(b, `,"createdAt":`...)
	b = jsonenc.Time(b, e.CreatedAt)
	b = append(b, `,"brandId":`...)
	b = jsonenc.String(b, e.BrandID, jsonenc.EscapeHTML)
	b = append(b, `,"data":`...)
	b = jsonenc.ConversionEventData(b, &d, jsonenc.EscapeHTML)
	return append(b, '}'), nil
}

// Event builds the outbox item for an event, to be written in the same
// transaction as the change it reports.
func (w *Writer) Event(brandID, name string, data any, at time.Time) (store.Op, error) {
	evt := envelope{ID: w.db.NewID("evt_", at), Event: name, CreatedAt: tally.NewTime(at), BrandID: brandID, Data: data}
	body, err := evt.marshal()
	if err != nil {
		return store.Op{}, err
	}
	return store.Put(store.Item{
		Key:       keys.Event(evt.ID),
		GSI1:      store.IndexKey{PK: keys.EventsByBrand(brandID, keys.ShardOf(evt.ID)), SK: evt.ID},
		GSI3:      store.IndexKey{PK: keys.OutboxPK(keys.QueueShardOf(evt.ID)), SK: evt.ID},
		Attrs:     map[string]string{"type": name, "brandId": brandID},
		Data:      body,
		ExpiresAt: at.Add(w.keep).Unix(), // deliveries read their envelope from it
	}, store.NotExists()), nil
}

// Events returns a brand's events, newest first. The webhook engine reads
// events by id; this listing is for inspection and tests. It does not show
// the conversion.created events made from the table's stream, which are in
// no index.
func (w *Writer) Events(ctx context.Context, brandID string, p records.ListParams) ([]tally.Event, string, error) {
	parts := make([]records.Partition, keys.Shards)
	for i := range parts {
		parts[i] = records.Partition{Index: store.GSI1, PK: keys.EventsByBrand(brandID, i)}
	}
	return records.List[tally.Event](ctx, w.db, parts, p, nil)
}

// Transact runs ops in one transaction (records.DB.Transact), the events
// among them entering the outbox as the Writer's Queue says, and announces
// those that did. The events keep the span of the request ctx serves, for
// their deliveries to send on.
func (w *Writer) Transact(ctx context.Context, ops ...store.Op) error {
	for i := range ops {
		if isEvent(&ops[i]) {
			trace.Keep(ctx, ops[i].Item.Attrs)
		}
	}
	for {
		write, checked, err := w.queue.prepare(ctx, w.db, ops)
		if err != nil {
			return err
		}
		err = w.db.Transact(ctx, write...)
		if i, failed := store.FailedOp(err); failed && i >= len(ops) {
			w.queue.gained(checked[i-len(ops)])
			continue // with the outbox this time
		}
		if err == nil && w.notify != nil {
			if ids := queued(write); len(ids) > 0 {
				w.notify(ids)
			}
		}
		return err
	}
}

// queued returns the ids of the events ops put into the outbox.
func queued(ops []store.Op) []string {
	var ids []string
	for i := range ops {
		if isQueued(&ops[i]) {
			ids = append(ids, ops[i].Item.GSI3.SK)
		}
	}
	return ids
}

// isEvent reports whether op puts an event (Event). It takes a pointer:
// an Op is a few hundred bytes, copied on every call otherwise.
func isEvent(op *store.Op) bool {
	return op.Kind == store.OpPut && strings.HasPrefix(op.Item.PK, "EVT#")
}

// isQueued reports whether op puts an event into the outbox.
func isQueued(op *store.Op) bool { return isEvent(op) && op.Item.GSI3.PK != "" }

// Keep is how long the Writer's events stay.
func (w *Writer) Keep() time.Duration { return w.keep }
