package statemachine_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/delivery"
	"github.com/tally-hq/tally/internal/statemachine"
	"github.com/tally-hq/tally/internal/webhooks"
)

func TestFileIsGenerated(t *testing.T) {
	want, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../" + statemachine.File)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the generator: run `go generate ./internal/statemachine`", statemachine.File)
	}
}

// Each wait lasts until the time the attempt before it decided (the
// schedule's wait, or a receiver's Retry-After), not a fixed time.
func TestWaitsTakeTheDecidedTime(t *testing.T) {
	raw, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	def := parse(t, raw)
	// A fresh execution (no resumeAt) starts at the first wait.
	start := def.States[def.StartAt]
	if start.Type != "Choice" || start.Default != statemachine.WaitState(1) {
		t.Fatalf("start state %s: %+v, want a choice whose default is %s", def.StartAt, start, statemachine.WaitState(1))
	}
	// Walk the pending path from there: it must wait once per retry of the
	// schedule, until the time attempt 1 (in the input) or the attempt
	// before decided, with one attempt after each, and then end.
	var waits []string
	attempts := 0
	for name, steps := start.Default, 0; steps < 100; steps++ {
		st, ok := def.States[name]
		if !ok {
			t.Fatalf("state %q does not exist", name)
		}
		switch st.Type {
		case "Wait":
			if st.Seconds != 0 {
				t.Errorf("wait %s waits a fixed %d s", name, st.Seconds)
			}
			waits = append(waits, st.TimestampPath)
			name = st.Next
		case "Task":
			if got := st.ResultSelector["nextAttemptAt.$"]; got != "$.Payload.nextAttemptAt" {
				t.Errorf("attempt %s keeps nextAttemptAt from %q, want $.Payload.nextAttemptAt", name, got)
			}
			attempts++
			name = st.Next
		case "Choice":
			// Paced waits for its turn (TestPacedAttemptsWaitForTheirTurn);
			// pending with a time to wait for goes on; anything else is done.
			if c := st.Choices; st.Default != "Done" || len(c) != 2 || len(c[1].And) != 2 ||
				c[1].And[0].Variable != "$.result.status" || c[1].And[0].StringEquals != "pending" ||
				c[1].And[1].Variable != "$.result.nextAttemptAt" || !c[1].And[1].IsTimestamp {
				t.Fatalf("choice %s: %+v", name, st)
			}
			name = st.Choices[1].Next
		case "Succeed":
			if len(waits) != len(webhooks.RetrySchedule) || attempts != len(webhooks.RetrySchedule) {
				t.Fatalf("the workflow waits %v with %d attempts, want %v with one attempt after each", waits, attempts, webhooks.RetrySchedule)
			}
			for i, path := range waits {
				want := "$.result.nextAttemptAt"
				if i == 0 {
					want = "$.nextAttemptAt"
				}
				if path != want {
					t.Errorf("wait %d waits until %q, want %q", i+1, path, want)
				}
			}
			return
		default:
			t.Fatalf("unexpected state type %q", st.Type)
		}
	}
	t.Fatal("the workflow does not end")
}

type definition struct {
	StartAt        string
	TimeoutSeconds int
	States         map[string]state
}

type state struct {
	Type           string
	Seconds        int
	TimestampPath  string
	Next           string
	Default        string
	ResultSelector map[string]string
	Choices        []struct {
		Variable      string
		NumericEquals int
		StringEquals  string
		BooleanEquals *bool
		Next          string
		And           []struct {
			Variable     string
			StringEquals string
			IsTimestamp  bool
		}
	}
	Catch []struct {
		ErrorEquals []string
		Next        string
	}
	Parameters struct {
		Payload map[string]any
	}
}

func parse(t *testing.T, raw []byte) definition {
	t.Helper()
	var def definition
	if err := json.Unmarshal(raw, &def); err != nil {
		t.Fatal(err)
	}
	return def
}

// A task that found its endpoint's pace used up made no attempt: its
// decision waits until the time the task returned and asks for the same
// attempt again, so the wait is neither an attempt nor a step of the
// schedule. The pace waits' names are what sfntest lets wait as defined.
func TestPacedAttemptsWaitForTheirTurn(t *testing.T) {
	raw, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	def := parse(t, raw)
	for attempt := 2; attempt <= webhooks.MaxAttempts; attempt++ {
		task := def.States[statemachine.AttemptState(attempt)]
		if got := task.ResultSelector["paced.$"]; got != "$.Payload.paced" {
			t.Errorf("attempt %d keeps paced from %q, want $.Payload.paced", attempt, got)
		}
		decide := def.States[task.Next]
		if c := decide.Choices; len(c) == 0 || c[0].Variable != "$.result.paced" || c[0].BooleanEquals == nil || !*c[0].BooleanEquals {
			t.Fatalf("after attempt %d: %+v, want a first choice on $.result.paced", attempt, decide)
		}
		name := decide.Choices[0].Next
		wait := def.States[name]
		if name != statemachine.PaceState(attempt) || !strings.HasPrefix(name, "Pace") || wait.Type != "Wait" ||
			wait.TimestampPath != "$.result.nextAttemptAt" || wait.Next != statemachine.AttemptState(attempt) {
			t.Errorf("a paced attempt %d goes to %s: %+v, want a wait until $.result.nextAttemptAt, then %s again", attempt, name, wait, statemachine.AttemptState(attempt))
		}
	}
}

// Every attempt task that fails after its retries is caught by the abandon
// task, which marks the delivery failed and fails the execution: no failed
// execution leaves its delivery pending.
func TestAttemptFailuresAreCaught(t *testing.T) {
	raw, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	def := parse(t, raw)
	for attempt := 2; attempt <= webhooks.MaxAttempts; attempt++ {
		st := def.States[statemachine.AttemptState(attempt)]
		if len(st.Catch) != 1 || !slices.Equal(st.Catch[0].ErrorEquals, []string{"States.ALL"}) || st.Catch[0].Next != statemachine.AbandonState {
			t.Errorf("%s catches %+v, want States.ALL to %s", statemachine.AttemptState(attempt), st.Catch, statemachine.AbandonState)
		}
	}
	abandon := def.States[statemachine.AbandonState]
	if abandon.Type != "Task" || abandon.Parameters.Payload["abandon"] != true || abandon.Next != statemachine.AbandonedState {
		t.Errorf("%s: %+v, want a task with abandon: true, then %s", statemachine.AbandonState, abandon, statemachine.AbandonedState)
	}
	if st := def.States[statemachine.AbandonedState]; st.Type != "Fail" {
		t.Errorf("%s is %s, want Fail (so that the failed-executions alarm fires)", statemachine.AbandonedState, st.Type)
	}
}

// A restarted execution (with attempt and resumeAt) waits until resumeAt
// and goes on at that attempt.
func TestResume(t *testing.T) {
	raw, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	def := parse(t, raw)
	start := def.States[def.StartAt]
	if len(start.Choices) != 1 || start.Choices[0].Variable != "$.resumeAt" || start.Choices[0].Next != statemachine.WaitToResumeState {
		t.Fatalf("start state: %+v, want a choice on $.resumeAt to %s", start, statemachine.WaitToResumeState)
	}
	resume := def.States[def.States[statemachine.WaitToResumeState].Next]
	got := map[int]string{}
	for _, c := range resume.Choices {
		if c.Variable != "$.attempt" {
			t.Errorf("resume choice on %s", c.Variable)
		}
		got[c.NumericEquals] = c.Next
	}
	for attempt := 2; attempt <= webhooks.MaxAttempts; attempt++ {
		if got[attempt] != statemachine.AttemptState(attempt) {
			t.Errorf("resuming at attempt %d goes to %q, want %s", attempt, got[attempt], statemachine.AttemptState(attempt))
		}
	}
	if len(got) != webhooks.MaxAttempts-1 {
		t.Errorf("resume choices %v", got)
	}
}

// The execution has a timeout, longer than every wait at its longest (a
// receiver may answer each attempt with a Retry-After of 24 h), so that
// the timed-out-executions alarm can fire and the reconciler restarts it.
func TestTimeout(t *testing.T) {
	raw, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	longest := time.Duration(len(webhooks.RetrySchedule)) * delivery.MaxRetryAfter
	def := parse(t, raw)
	if got := time.Duration(def.TimeoutSeconds) * time.Second; got != statemachine.Timeout() || got < longest+time.Hour {
		t.Errorf("TimeoutSeconds %v, want Timeout() = %v, at least every wait at %v and an hour", got, statemachine.Timeout(), delivery.MaxRetryAfter)
	}
}
