package statemachine_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

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

func TestWaitsAreTheSchedule(t *testing.T) {
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
	// Walk the pending path from there: it must wait each delay of the
	// schedule in turn, with one attempt after each, and then end.
	var waits []time.Duration
	attempts := 0
	for name, steps := start.Default, 0; steps < 100; steps++ {
		st, ok := def.States[name]
		if !ok {
			t.Fatalf("state %q does not exist", name)
		}
		switch st.Type {
		case "Wait":
			waits = append(waits, time.Duration(st.Seconds)*time.Second)
			name = st.Next
		case "Task":
			attempts++
			name = st.Next
		case "Choice":
			if st.Default != "Done" || len(st.Choices) != 1 || st.Choices[0].StringEquals != "pending" {
				t.Fatalf("choice %s: %+v", name, st)
			}
			name = st.Choices[0].Next
		case "Succeed":
			if len(waits) != len(webhooks.RetrySchedule) || attempts != len(webhooks.RetrySchedule) {
				t.Fatalf("the workflow waits %v with %d attempts, want %v with one attempt after each", waits, attempts, webhooks.RetrySchedule)
			}
			for i, w := range webhooks.RetrySchedule {
				if waits[i] != w {
					t.Errorf("wait %d = %v, want %v", i+1, waits[i], w)
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
	Type    string
	Seconds int
	Next    string
	Default string
	Choices []struct {
		Variable      string
		NumericEquals int
		StringEquals  string
		Next          string
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

// The execution has a timeout, longer than the schedule, so that the
// timed-out-executions alarm can fire and the reconciler restarts it.
func TestTimeout(t *testing.T) {
	raw, err := statemachine.Definition()
	if err != nil {
		t.Fatal(err)
	}
	var schedule time.Duration
	for _, w := range webhooks.RetrySchedule {
		schedule += w
	}
	def := parse(t, raw)
	if got := time.Duration(def.TimeoutSeconds) * time.Second; got != statemachine.Timeout() || got < schedule+time.Hour {
		t.Errorf("TimeoutSeconds %v, want Timeout() = %v, at least the schedule (%v) and an hour", got, statemachine.Timeout(), schedule)
	}
}
