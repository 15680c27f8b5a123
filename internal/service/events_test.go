package service_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/conversions"
	"github.com/tally-hq/tally/internal/store"
	"github.com/tally-hq/tally/internal/testenv"
)

// oneEvent asserts that exactly one event of the name exists and returns
// its decoded data.
func oneEvent[T any](f *fixture, name string) (tally.Event, T) {
	f.t.Helper()
	var data T
	evts := f.events(name)
	if len(evts) != 1 {
		f.t.Fatalf("%d %s events, want 1", len(evts), name)
	}
	e := evts[0]
	if !strings.HasPrefix(e.ID, "evt_") || e.BrandID != f.brandID || e.Event != name || e.CreatedAt.IsZero() {
		f.t.Fatalf("bad envelope: %+v", e)
	}
	dec := json.NewDecoder(strings.NewReader(string(e.Data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&data); err != nil {
		f.t.Fatalf("%s data %s: %v", name, e.Data, err)
	}
	return e, data
}

func TestEveryTransitionWritesOneEvent(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)

		applied := f.partner(false)
		_, pa := oneEvent[tally.PartnerEventData](f, tally.EventPartnerApplied)
		if want := (tally.PartnerEventData{PartnerID: applied.ID, Name: applied.Name, Email: applied.Email, Status: "applied"}); pa != want {
			t.Errorf("partner.applied data = %+v, want %+v", pa, want)
		}
		if _, err := f.svc.Partners.ApprovePartner(f.ctx, f.brandID, applied.ID); err != nil {
			t.Fatal(err)
		}
		_, pv := oneEvent[tally.PartnerEventData](f, tally.EventPartnerApproved)
		if pv.PartnerID != applied.ID || pv.Status != "active" || pv.PreviousStatus != "applied" {
			t.Errorf("partner.approved data = %+v", pv)
		}
		turnedDown := f.partner(false)
		if _, err := f.svc.Partners.RejectPartner(f.ctx, f.brandID, turnedDown.ID); err != nil {
			t.Fatal(err)
		}
		_, pr := oneEvent[tally.PartnerEventData](f, tally.EventPartnerRejected)
		if pr.PartnerID != turnedDown.ID || pr.Status != "rejected" || pr.PreviousStatus != "applied" {
			t.Errorf("partner.rejected data = %+v", pr)
		}
		// A transition that is not allowed writes nothing.
		if _, err := f.svc.Partners.ApprovePartner(f.ctx, f.brandID, turnedDown.ID); tally.ErrorCode(err) != tally.ECodeInvalidTransition {
			t.Errorf("approving a rejected partner: %v, want invalid_transition", err)
		}
		if n := len(f.events(tally.EventPartnerApproved)); n != 1 {
			t.Errorf("%d partner.approved events after a refused approval, want 1", n)
		}

		auto := f.offer(tally.ApprovalAuto, 0, tally.Caps{Global: ptr(int64(2))})
		c := f.convert(auto.ID, applied.ID, conversions.ConversionInput{Sub1: ptr("s1"), ExternalTxnID: ptr("t-1"), RevenueCents: ptr(int64(1234))})
		_, cc := oneEvent[tally.ConversionEventData](f, tally.EventConversionCreated)
		want := tally.ConversionEventData{ConversionID: c.ID, PartnerID: applied.ID, OfferID: auto.ID, RevenueCents: 1234,
			PayoutCents: 300, Currency: "USD", Status: "approved", Sub1: "s1", ExternalTxnID: "t-1"}
		if cc != want {
			t.Errorf("conversion.created data = %+v, want %+v", cc, want)
		}
		// The second conversion reaches the global cap of 2: one cap.reached.
		second := f.convert(auto.ID, applied.ID, conversions.ConversionInput{})
		_, capData := oneEvent[tally.CapReachedEventData](f, tally.EventCapReached)
		if want := (tally.CapReachedEventData{OfferID: auto.ID, Cap: "global", Limit: 2, Period: "global", ConversionID: second.ID}); capData != want {
			t.Errorf("cap.reached data = %+v, want %+v", capData, want)
		}
		if _, _, err := f.svc.Conversions.RecordConversion(f.ctx, f.brandID, conversions.ConversionInput{OfferID: &auto.ID, PartnerID: &applied.ID}); tally.ErrorCode(err) != tally.ECodeCapReached {
			t.Errorf("third conversion: %v, want cap_reached", err)
		}
		if n := len(f.events(tally.EventCapReached)); n != 1 {
			t.Errorf("%d cap.reached events, want 1", n)
		}

		manual := f.offer(tally.ApprovalManual, 0, tally.Caps{})
		toApprove := f.convert(manual.ID, applied.ID, conversions.ConversionInput{})
		toReject := f.convert(manual.ID, applied.ID, conversions.ConversionInput{})
		if toApprove.Status != "pending" || toApprove.ApproveAt != nil {
			t.Errorf("manual offer without hold: status %q approveAt %v, want pending and none", toApprove.Status, toApprove.ApproveAt)
		}
		if _, err := f.svc.Conversions.ApproveConversion(f.ctx, f.brandID, toApprove.ID); err != nil {
			t.Fatal(err)
		}
		_, ca := oneEvent[tally.ConversionEventData](f, tally.EventConversionApproved)
		if ca.ConversionID != toApprove.ID || ca.Status != "approved" || ca.Reason != "manual" {
			t.Errorf("conversion.approved data = %+v", ca)
		}
		if _, err := f.svc.Conversions.RejectConversion(f.ctx, f.brandID, toReject.ID); err != nil {
			t.Fatal(err)
		}
		_, cr := oneEvent[tally.ConversionEventData](f, tally.EventConversionRejected)
		if cr.ConversionID != toReject.ID || cr.Status != "rejected" {
			t.Errorf("conversion.rejected data = %+v", cr)
		}
		if _, err := f.svc.Conversions.RejectConversion(f.ctx, f.brandID, toApprove.ID); tally.ErrorCode(err) != tally.ECodeInvalidTransition {
			t.Errorf("rejecting an approved conversion: %v, want invalid_transition", err)
		}

		if _, err := f.svc.Partners.BanPartner(f.ctx, f.brandID, applied.ID); err != nil {
			t.Fatal(err)
		}
		_, pb := oneEvent[tally.PartnerEventData](f, tally.EventPartnerBanned)
		if pb.PartnerID != applied.ID || pb.Status != "banned" || pb.PreviousStatus != "active" {
			t.Errorf("partner.banned data = %+v", pb)
		}
		if _, err := f.svc.Partners.BanPartner(f.ctx, f.brandID, applied.ID); tally.ErrorCode(err) != tally.ECodeInvalidTransition {
			t.Errorf("banning twice: %v, want invalid_transition", err)
		}

		counts := map[string]int{}
		for _, e := range f.events("") {
			counts[e.Event]++
		}
		wantCounts := map[string]int{"partner.applied": 2, "partner.approved": 1, "partner.rejected": 1, "partner.banned": 1,
			"conversion.created": 4, "conversion.approved": 1, "conversion.rejected": 1, "cap.reached": 1}
		if !reflect.DeepEqual(counts, wantCounts) {
			t.Errorf("events written = %v, want %v", counts, wantCounts)
		}
	})
}

func TestHoldTimeApproval(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		p := f.partner(true)
		held := f.offer(tally.ApprovalManual, 24, tally.Caps{})
		due := f.convert(held.ID, p.ID, conversions.ConversionInput{})
		if due.Status != "pending" || due.ApproveAt == nil || !due.ApproveAt.Equal(start.Add(24*time.Hour)) {
			t.Fatalf("held conversion: status %q approveAt %v, want pending at %v", due.Status, due.ApproveAt, start.Add(24*time.Hour))
		}
		rejected := f.convert(held.ID, p.ID, conversions.ConversionInput{})
		if _, err := f.svc.Conversions.RejectConversion(f.ctx, f.brandID, rejected.ID); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(time.Hour)
		later := f.convert(held.ID, p.ID, conversions.ConversionInput{}) // due an hour after the first

		f.clock.Set(start.Add(24*time.Hour - time.Millisecond))
		if n, err := f.svc.Conversions.ApproveDue(f.ctx); err != nil || n != 0 {
			t.Fatalf("just before the hold ends: approved %d (%v), want 0", n, err)
		}
		f.clock.Set(start.Add(24 * time.Hour))
		if n, err := f.svc.Conversions.ApproveDue(f.ctx); err != nil || n != 1 {
			t.Fatalf("when the hold ends: approved %d (%v), want 1", n, err)
		}
		got, _ := f.svc.Conversions.Conversion(f.ctx, f.brandID, due.ID)
		if got.Status != "approved" || got.ApproveAt != nil {
			t.Errorf("after the hold: %+v, want approved with no approveAt", got)
		}
		_, data := oneEvent[tally.ConversionEventData](f, tally.EventConversionApproved)
		if data.ConversionID != due.ID || data.Reason != "hold_elapsed" {
			t.Errorf("conversion.approved = %+v, want %s with reason hold_elapsed", data, due.ID)
		}
		if n, _ := f.svc.Conversions.ApproveDue(f.ctx); n != 0 {
			t.Errorf("second run approved %d, want 0", n)
		}
		if got, _ := f.svc.Conversions.Conversion(f.ctx, f.brandID, rejected.ID); got.Status != "rejected" {
			t.Errorf("rejected conversion became %q", got.Status)
		}
		if got, _ := f.svc.Conversions.Conversion(f.ctx, f.brandID, later.ID); got.Status != "pending" {
			t.Errorf("conversion due later is %q, want pending", got.Status)
		}
		f.clock.Advance(time.Hour)
		if n, _ := f.svc.Conversions.ApproveDue(f.ctx); n != 1 {
			t.Errorf("an hour later approved %d, want 1", n)
		}
	})
}

// Approval runs that overlap (the local server's ticker and a run on AWS
// on one table, or a retried invocation) approve each due conversion once:
// the counts add up to the conversions, each has one conversion.approved.
func TestHoldTimeApprovalRuns(t *testing.T) {
	testenv.ForEachStore(t, func(t *testing.T, st store.Store) {
		f := newFixture(t, st)
		p := f.partner(true)
		held := f.offer(tally.ApprovalManual, 1, tally.Caps{})
		const n = 60
		for range n {
			f.convert(held.ID, p.ID, conversions.ConversionInput{})
		}
		f.clock.Advance(time.Hour)
		var (
			wg       sync.WaitGroup
			approved atomic.Int64
		)
		for range 3 {
			wg.Go(func() {
				got, err := f.svc.Conversions.ApproveDue(f.ctx)
				if err != nil {
					t.Error(err)
				}
				approved.Add(int64(got))
			})
		}
		wg.Wait()
		if approved.Load() != n {
			t.Errorf("the runs approved %d in all, want %d", approved.Load(), n)
		}
		approvedOnce(f, n)
		if got, _ := f.svc.Conversions.ApproveDue(f.ctx); got != 0 {
			t.Errorf("a further run approved %d, want 0", got)
		}
	})
}

// A backlog larger than what runs do before their deadline is drained by
// the runs that follow, racing as they do on AWS (a run starts every minute
// while earlier ones still work), and no conversion is approved twice: the
// runs share the hold queue's shards by lease, and each approval is
// conditional. On DynamoDB Local, where approvals take milliseconds.
func TestHoldTimeApprovalBacklog(t *testing.T) {
	f := newFixture(t, testenv.DynamoDB(t))
	p := f.partner(true)
	held := f.offer(tally.ApprovalManual, 1, tally.Caps{})
	const n = 240
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range n / 8 {
				in := conversions.ConversionInput{OfferID: &held.ID, PartnerID: &p.ID}
				if _, _, err := f.svc.Conversions.RecordConversion(f.ctx, f.brandID, in); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("recorded %d conversions", n)
	f.clock.Advance(time.Hour)

	// race runs the approval runs at once, each with the deadline given.
	race := func(deadlines ...time.Time) []conversions.ApprovalRun {
		runs := make([]conversions.ApprovalRun, len(deadlines))
		var wg sync.WaitGroup
		for i, d := range deadlines {
			wg.Go(func() {
				var err error
				if runs[i], err = f.svc.Conversions.ApproveDueBy(f.ctx, d); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		return runs
	}
	approved := 0
	// Two runs whose deadline comes long before n approvals are done.
	first := race(time.Now().Add(50*time.Millisecond), time.Now().Add(50*time.Millisecond))
	for _, r := range first {
		approved += r.Approved
	}
	if left := first[0].Unfinished + first[1].Unfinished; approved >= n || left == 0 {
		t.Fatalf("runs with a 50 ms deadline approved %d of %d and left %d shards unfinished: the backlog did not outlast them", approved, n, left)
	}
	// The runs after them, racing without a deadline, drain the rest.
	rest, cpu, start := approved, cpuTime(), time.Now()
	for _, r := range race(time.Time{}, time.Time{}) {
		approved += r.Approved
	}
	if k := approved - rest; k > 0 {
		t.Logf("%d approvals in %v (%.0f/s); this process's CPU %v, %v an approval", k, time.Since(start).Round(time.Millisecond),
			float64(k)/time.Since(start).Seconds(), (cpuTime() - cpu).Round(time.Millisecond), (cpuTime()-cpu)/time.Duration(k))
	}
	if approved != n {
		t.Errorf("the runs approved %d in all, want %d", approved, n)
	}
	approvedOnce(f, n)
	// Every lease was given back: a further run finds no shard busy.
	if r := race(time.Now().Add(time.Minute))[0]; r.Approved != 0 || r.Busy != 0 || r.Unfinished != 0 {
		t.Errorf("a further run: %+v, want nothing approved, busy or unfinished", r)
	}
}

// approvedOnce checks that n conversions were approved, each with one
// conversion.approved.
func approvedOnce(f *fixture, n int) {
	f.t.Helper()
	seen := map[string]int{}
	for _, e := range f.events(tally.EventConversionApproved) {
		var d tally.ConversionEventData
		if err := json.Unmarshal(e.Data, &d); err != nil {
			f.t.Fatal(err)
		}
		seen[d.ConversionID]++
	}
	for id, k := range seen {
		if k != 1 {
			f.t.Errorf("conversion %s approved %d times", id, k)
		}
	}
	if len(seen) != n {
		f.t.Errorf("%d conversions approved, want %d", len(seen), n)
	}
}

// cpuTime is the CPU time this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
