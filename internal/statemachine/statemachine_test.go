package statemachine_test

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"

	"github.com/tally-hq/tally/internal/statemachine"
	"github.com/tally-hq/tally/internal/tracking"
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
	var def struct {
		StartAt string
		States  map[string]struct {
			Type    string
			Seconds int
			Next    string
			Default string
			Choices []struct{ Next string }
		}
	}
	if err := json.Unmarshal(raw, &def); err != nil {
		t.Fatal(err)
	}
	// Walk the pending path from the start: it must wait each delay of the
	// schedule in turn, with one attempt after each, and then end.
	var waits []time.Duration
	attempts := 0
	for name, steps := def.StartAt, 0; steps < 100; steps++ {
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
			if st.Default != "Done" || len(st.Choices) != 1 {
				t.Fatalf("choice %s: %+v", name, st)
			}
			name = st.Choices[0].Next
		case "Succeed":
			if len(waits) != len(tracking.RetrySchedule) || attempts != len(tracking.RetrySchedule) {
				t.Fatalf("the workflow waits %v with %d attempts, want %v with one attempt after each", waits, attempts, tracking.RetrySchedule)
			}
			for i, w := range tracking.RetrySchedule {
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
