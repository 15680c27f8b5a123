// Package payouts answers the question a brand asks every month, what do
// we owe whom: partners' balances, and payouts that batch what is owed in
// one currency, which the brand pays by its own means and marks paid.
//
// A payout claims owed entries (package ledger) with conditional deletes,
// so each conversion is in at most one payout however many are created at
// once. A reversal adds a negative entry instead of taking one away, so it
// never races a payout: the payout that claims the negative entry
// subtracts it (a clawback, when an earlier payout paid the conversion).
package payouts

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/audit"
	"github.com/tally-hq/tally/internal/ids"
	"github.com/tally-hq/tally/internal/keys"
	"github.com/tally-hq/tally/internal/ledger"
	"github.com/tally-hq/tally/internal/money"
	"github.com/tally-hq/tally/internal/outbox"
	"github.com/tally-hq/tally/internal/records"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/validate"
)

// Service keeps balances and payouts.
type Service struct {
	db       *records.DB
	events   *outbox.Writer
	partners partnerReader
}

// partnerReader reads the partners balances and payout lines name.
type partnerReader interface {
	Partner(ctx context.Context, brandID, partnerID string) (tally.Partner, error)
}

// New returns the Service over db, writing through events.
func New(db *records.DB, events *outbox.Writer, p partnerReader) *Service {
	return &Service{db: db, events: events, partners: p}
}

// Balances is the answer of GET /partners/{id}/balance.
type Balances struct {
	Data []tally.Balance `json:"data"`
}

// Balance returns what the brand owes a partner, per currency: counters
// kept with every change, not a sum over its conversions.
func (s *Service) Balance(ctx context.Context, brandID, partnerID string) (Balances, error) {
	if _, err := s.partners.Partner(ctx, brandID, partnerID); err != nil {
		return Balances{}, err
	}
	b, err := ledger.Balances(ctx, s.db, brandID, partnerID)
	return Balances{Data: b}, err
}

// AllBalances returns the balances of every partner of the brand that
// has any, by partner id, read in a few queries whatever their number.
func (s *Service) AllBalances(ctx context.Context, brandID string) (map[string][]tally.Balance, error) {
	return ledger.AllBalances(ctx, s.db, brandID)
}

// CreateInput is the body of POST /payouts.
type CreateInput struct {
	Currency   *string  `json:"currency"`
	Through    *string  `json:"through"`
	PartnerIDs []string `json:"partnerIds"`
}

// maxPartnerIDs bounds partnerIds.
const maxPartnerIDs = 100

func (in CreateInput) validate(today string) error {
	if err := validate.Currency("currency", in.Currency, true); err != nil {
		return err
	}
	if in.Through != nil {
		day, err := time.Parse(time.DateOnly, *in.Through)
		if err != nil || day.Format(time.DateOnly) != *in.Through {
			return validate.InvalidField("through", "through must be a date, YYYY-MM-DD: the last UTC day whose approved conversions the payout includes.")
		}
		if *in.Through > today {
			return validate.InvalidField("through", "through %s is in the future; the latest is today, %s (UTC).", *in.Through, today)
		}
	}
	if in.PartnerIDs != nil && (len(in.PartnerIDs) == 0 || len(in.PartnerIDs) > maxPartnerIDs) {
		return validate.InvalidField("partnerIds", "partnerIds must list 1 to %d partners, or be left out for all.", maxPartnerIDs)
	}
	for _, id := range in.PartnerIDs {
		if !ids.Valid("prt_", id) {
			return validate.InvalidField("partnerIds", "partnerIds: %q is not a partner id.", id)
		}
	}
	return nil
}

// claimsPerWrite is how many owed entries one transaction claims, with
// room for the line, the balance, the payout and its audit log entry.
const claimsPerWrite = store.MaxTransactOps - 4

// CreatePayout batches what the brand owes in a currency, through a day
// and for some partners if asked, into a pending payout with one line per
// partner owed more than 0. It answers 422 when nobody is. A partner's
// entries are claimed a transaction at a time, each moving the claimed
// sum from owed to inPayout; an entry another payout took meanwhile is
// left out, and a partner whose remaining sum falls to 0 or below gets no
// more claims.
func (s *Service) CreatePayout(ctx context.Context, brandID string, in CreateInput) (tally.Payout, error) {
	now := s.db.Now()
	byPartner, err := s.owed(ctx, brandID, in, now)
	if err != nil {
		return tally.Payout{}, err
	}
	currency, through := *in.Currency, validate.Deref(in.Through, "")
	b := batch{Payout: tally.Payout{ID: s.db.NewID("pay_", now), BrandID: brandID, Currency: currency, Status: tally.PayoutPending, Through: through, CreatedAt: tally.NewTime(now)}}
	for _, partnerID := range slices.Sorted(maps.Keys(byPartner)) {
		if err := s.claim(ctx, &b, partnerID, byPartner[partnerID]); err != nil {
			return tally.Payout{}, err
		}
	}
	if !b.stored {
		return tally.Payout{}, nobodyOwed(currency, through)
	}
	return s.Payout(ctx, brandID, b.ID)
}

// Preview is the payout CreatePayout would create now, claiming nothing:
// a line per partner whose owed entries sum to more than 0, and the
// totals. It answers as CreatePayout does to bad input and to a currency
// nobody is owed. (A payout created later may differ: conversions
// approved or reversed since, another payout created meanwhile.)
func (s *Service) Preview(ctx context.Context, brandID string, in CreateInput) (tally.Payout, error) {
	byPartner, err := s.owed(ctx, brandID, in, s.db.Now())
	if err != nil {
		return tally.Payout{}, err
	}
	p := tally.Payout{BrandID: brandID, Currency: *in.Currency, Status: tally.PayoutPending, Through: validate.Deref(in.Through, "")}
	for _, partnerID := range slices.Sorted(maps.Keys(byPartner)) {
		line := tally.PayoutLine{PartnerID: partnerID}
		for _, e := range byPartner[partnerID] {
			line.AmountCents += e.AmountCents
			line.Conversions += e.Count
		}
		if line.AmountCents > 0 {
			p.Lines = append(p.Lines, line)
			p.TotalCents += line.AmountCents
			p.Conversions += line.Conversions
		}
	}
	if len(p.Lines) == 0 {
		return tally.Payout{}, nobodyOwed(p.Currency, p.Through)
	}
	return p, nil
}

// owed validates in and reads the owed entries it asks for, by partner.
func (s *Service) owed(ctx context.Context, brandID string, in CreateInput, now time.Time) (map[string][]ledger.Entry, error) {
	if err := in.validate(now.Format(time.DateOnly)); err != nil {
		return nil, err
	}
	keep := func(string) bool { return true }
	if in.PartnerIDs != nil {
		keep = func(id string) bool { return slices.Contains(in.PartnerIDs, id) }
	}
	entries, err := ledger.Owed(ctx, s.db, brandID, *in.Currency, validate.Deref(in.Through, ""), keep)
	if err != nil {
		return nil, err
	}
	byPartner := map[string][]ledger.Entry{}
	for _, e := range entries {
		byPartner[e.PartnerID] = append(byPartner[e.PartnerID], e)
	}
	return byPartner, nil
}

// payoutSummary describes a new payout for the audit log (its totals
// are known once every partner's entries are claimed).
func payoutSummary(p tally.Payout) string {
	if p.Through != "" {
		return "payout in " + p.Currency + " of conversions approved through " + p.Through
	}
	return "payout in " + p.Currency
}

// batch is a payout being created: stored once its first claim is.
type batch struct {
	tally.Payout
	stored bool
}

func nobodyOwed(currency, through string) error {
	if through != "" {
		return validate.InvalidField("currency", "Nobody is owed anything in currency %s for conversions approved through %s.", currency, through)
	}
	return validate.InvalidField("currency", "Nobody is owed anything in currency %s.", currency)
}

// claim claims a partner's owed entries into p, as long as their sum is
// more than 0, and adds them to p's totals.
func (s *Service) claim(ctx context.Context, p *batch, partnerID string, entries []ledger.Entry) error {
	var claimed int64
	sum := func() int64 {
		n := claimed
		for _, e := range entries {
			n += e.AmountCents
		}
		return n
	}
	for len(entries) > 0 && sum() > 0 {
		chunk := entries[:min(len(entries), claimsPerWrite)]
		var amount, n int64
		ops := make([]store.Op, 0, len(chunk)+3)
		for _, e := range chunk {
			ops = append(ops, ledger.Claim(e))
			amount += e.AmountCents
			n += e.Count
		}
		ops = append(ops,
			store.Op{Kind: store.OpUpdate, Key: keys.PayoutLine(p.ID, partnerID), Set: map[string]string{"status": tally.PayoutPending},
				Add: map[string]int64{"amount": amount, "conversions": n}},
			ledger.Move(p.BrandID, partnerID, p.Currency, p.ID, -amount, amount, 0))
		if !p.stored {
			ops = append(ops, store.Put(payoutItem(p.Payout, amount, n), store.NotExists()))
			ops = append(ops, audit.Record(ctx, p.BrandID, audit.PayoutCreated, p.ID, payoutSummary(p.Payout), p.CreatedAt.Time)...)
		} else {
			ops = append(ops, store.Increment(keys.Payout(p.BrandID, p.ID), map[string]int64{"totalCents": amount, "conversions": n}))
		}
		err := s.db.Transact(ctx, ops...)
		if i, failed := store.FailedOp(err); failed && i < len(chunk) {
			// Taken by another payout, or grown by a stream batch since it
			// was read: the next payout has it.
			entries = slices.Delete(entries, i, i+1)
			continue
		}
		if err != nil {
			return err
		}
		p.stored = true
		claimed += amount
		p.TotalCents += amount
		p.Conversions += n
		entries = entries[len(chunk):]
	}
	return nil
}

// payoutItem is a new payout's item: its fixed fields in the body, its
// status and totals in attributes that later writes change in place.
func payoutItem(p tally.Payout, total, conversions int64) store.Item {
	return store.Item{Key: keys.Payout(p.BrandID, p.ID), Attrs: map[string]string{"status": p.Status},
		Nums: map[string]int64{"totalCents": total, "conversions": conversions},
		Data: records.MustJSON(tally.Payout{ID: p.ID, BrandID: p.BrandID, Currency: p.Currency, Through: p.Through, CreatedAt: p.CreatedAt})}
}

// record is a stored payout, read with its attributes.
type record struct{ tally.Payout }

func (r *record) FromItem(it store.Item) {
	r.Status, r.TotalCents, r.Conversions = it.Attrs["status"], it.Nums["totalCents"], it.Nums["conversions"]
	if at, err := time.Parse(time.RFC3339Nano, it.Attrs["paidAt"]); err == nil {
		t := tally.NewTime(at)
		r.PaidAt = &t
	}
}

// Payout returns one of the brand's payouts with its lines.
func (s *Service) Payout(ctx context.Context, brandID, payoutID string) (tally.Payout, error) {
	r, err := records.GetByID[record](ctx, s.db, "payout", "pay_", payoutID, func() store.Key { return keys.Payout(brandID, payoutID) })
	if err != nil {
		return tally.Payout{}, err
	}
	p := r.Payout
	lines, err := s.lines(ctx, payoutID)
	for _, l := range lines {
		p.Lines = append(p.Lines, l.PayoutLine)
	}
	if p.Lines == nil {
		p.Lines = []tally.PayoutLine{}
	}
	return p, err
}

// line is a payout line with whether its amount has moved to paid.
type line struct {
	tally.PayoutLine
	paid bool
}

func (s *Service) lines(ctx context.Context, payoutID string) ([]line, error) {
	var out []line
	q := store.Query{PK: keys.PayoutLinesPK(payoutID), Limit: 1000}
	for {
		page, err := s.db.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range page.Items {
			out = append(out, line{
				PayoutLine: tally.PayoutLine{PartnerID: it.SK[len("LINE#"):], AmountCents: it.Nums["amount"], Conversions: it.Nums["conversions"]},
				paid:       it.Attrs["status"] == tally.PayoutPaid,
			})
		}
		if q.Cursor = page.Cursor; q.Cursor == "" {
			return out, nil
		}
	}
}

// Payouts lists the brand's payouts, newest first, without their lines,
// optionally only those with status.
func (s *Service) Payouts(ctx context.Context, brandID, status string, p records.ListParams) ([]tally.Payout, string, error) {
	if err := validate.OneOf("status", &status, "", tally.PayoutPending, tally.PayoutPaid); err != nil {
		return nil, "", err
	}
	sp := records.Span{Parts: []records.Partition{{PK: keys.BrandPK(brandID)}}, Prefix: keys.PayoutSKPrefix, Filter: status}
	rs, next, err := records.ListSpan(ctx, s.db, sp, p, func(r *record) bool { return status == "" || r.Status == status })
	out := make([]tally.Payout, len(rs))
	for i, r := range rs {
		out[i] = r.Payout
	}
	return out, next, err
}

// PartnerLine is one partner's line of a payout, with the payout's
// currency, status and times: what the partner portal shows.
type PartnerLine struct {
	PayoutID    string      `json:"payoutId"`
	Currency    string      `json:"currency"`
	Status      string      `json:"status"`
	AmountCents int64       `json:"amountCents"`
	Conversions int64       `json:"conversions"`
	CreatedAt   tally.Time  `json:"createdAt"`
	PaidAt      *tally.Time `json:"paidAt"`
}

// PartnerLines lists a partner's lines in the brand's payouts, newest
// first. It pages through the payouts (they are few: one a month or so)
// and reads the partner's line of each, so a page may hold fewer lines
// than its limit, and the cursor, when not empty, goes on.
func (s *Service) PartnerLines(ctx context.Context, brandID, partnerID string, p records.ListParams) ([]PartnerLine, string, error) {
	list, next, err := s.Payouts(ctx, brandID, "", p)
	if err != nil {
		return nil, "", err
	}
	out := []PartnerLine{}
	for _, pay := range list {
		it, err := s.db.Get(ctx, keys.PayoutLine(pay.ID, partnerID))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		out = append(out, PartnerLine{PayoutID: pay.ID, Currency: pay.Currency, Status: pay.Status,
			AmountCents: it.Nums["amount"], Conversions: it.Nums["conversions"], CreatedAt: pay.CreatedAt, PaidAt: pay.PaidAt})
	}
	return out, next, nil
}

// linesPerWrite is how many lines one transaction moves to paid: two
// operations each.
const linesPerWrite = store.MaxTransactOps / 2

// MarkPaid moves a pending payout to paid and emits payout.paid; each
// line's amount then moves from its partner's inPayout to paid, a
// transaction of lines at a time, each line once (its status is the
// condition). A payout already paid whose lines have not all moved (the
// request that paid it ended early) is completed, and answers 200; else
// it answers 409.
func (s *Service) MarkPaid(ctx context.Context, brandID, payoutID string) (tally.Payout, error) {
	p, err := s.Payout(ctx, brandID, payoutID)
	if err != nil {
		return p, err
	}
	lines, err := s.lines(ctx, payoutID)
	if err != nil {
		return p, err
	}
	if p.Status == tally.PayoutPending {
		now := s.db.Now()
		evt, err := s.events.Event(brandID, tally.EventPayoutPaid, tally.PayoutEventData{
			PayoutID: p.ID, Currency: p.Currency, TotalCents: p.TotalCents, Conversions: p.Conversions, Partners: len(lines),
		}, now)
		if err != nil {
			return p, err
		}
		err = s.events.Transact(ctx, append([]store.Op{store.Op{Kind: store.OpUpdate, Key: keys.Payout(brandID, payoutID),
			Set:   map[string]string{"status": tally.PayoutPaid, "paidAt": tally.NewTime(now).Format(tally.TimeLayout)},
			Conds: []store.Cond{store.AttrEquals("status", tally.PayoutPending)}}, evt},
			audit.Record(ctx, brandID, audit.PayoutPaid, p.ID, fmt.Sprintf("%s %s to %d partners", money.Major(p.TotalCents, p.Currency), p.Currency, len(lines)), now)...)...)
		if _, failed := store.FailedOp(err); failed {
			return s.MarkPaid(ctx, brandID, payoutID) // paid meanwhile: complete it, or say so
		}
		if err != nil {
			return p, err
		}
	} else if !slices.ContainsFunc(lines, func(l line) bool { return !l.paid }) {
		return p, tally.Errorf(tally.ECodeInvalidTransition, "Payout %s is already paid.", payoutID)
	}
	if err := s.payLines(ctx, p, lines); err != nil {
		return p, err
	}
	return s.Payout(ctx, brandID, payoutID)
}

// payLines moves the amounts of the lines not yet paid to paid.
func (s *Service) payLines(ctx context.Context, p tally.Payout, lines []line) error {
	lines = slices.DeleteFunc(lines, func(l line) bool { return l.paid })
	for len(lines) > 0 {
		chunk := lines[:min(len(lines), linesPerWrite)]
		ops := make([]store.Op, 0, 2*len(chunk))
		for _, l := range chunk {
			ops = append(ops,
				store.Op{Kind: store.OpUpdate, Key: keys.PayoutLine(p.ID, l.PartnerID), Set: map[string]string{"status": tally.PayoutPaid},
					Conds: []store.Cond{store.AttrEquals("status", tally.PayoutPending)}},
				ledger.Move(p.BrandID, l.PartnerID, p.Currency, p.ID, 0, -l.AmountCents, l.AmountCents))
		}
		err := s.db.Transact(ctx, ops...)
		if i, failed := store.FailedOp(err); failed {
			lines = slices.Delete(lines, i/2, i/2+1) // moved by a concurrent request
			continue
		}
		if err != nil {
			return err
		}
		lines = lines[len(chunk):]
	}
	return nil
}

// WriteCSV writes a payout's lines as CSV for the brand's bank or
// payment tool: partner id, name, e-mail, amount in major units, currency
// and how many conversions the line sums.
func (s *Service) WriteCSV(ctx context.Context, w io.Writer, p tally.Payout) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"partnerId", "name", "email", "amount", "currency", "conversions"})
	lines := slices.SortedFunc(slices.Values(p.Lines), func(a, b tally.PayoutLine) int { return cmp.Compare(a.PartnerID, b.PartnerID) })
	for _, l := range lines {
		partner, err := s.partners.Partner(ctx, p.BrandID, l.PartnerID)
		if err != nil {
			return err
		}
		_ = cw.Write([]string{l.PartnerID, csvSafe(partner.Name), csvSafe(partner.Email), money.Major(l.AmountCents, p.Currency), p.Currency, strconv.FormatInt(l.Conversions, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// csvSafe keeps a spreadsheet from running a name as a formula (a name
// is what a partner typed on the public form).
func csvSafe(s string) string {
	if s != "" && (s[0] == '=' || s[0] == '+' || s[0] == '-' || s[0] == '@') {
		return "'" + s
	}
	return s
}
