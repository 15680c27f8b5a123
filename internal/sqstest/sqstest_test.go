package sqstest_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/sqstest"
)

func TestMain(m *testing.M) { sqstest.Main(m) }

// These tests pin what the pipeline's tests count on fauxqs for: messages
// sent by the functions' client (internal/sqsjson), received and deleted
// by the SDK's as Lambda's event source mapping does.

func send(t *testing.T, q sqstest.Queue, bodies ...string) {
	t.Helper()
	if err := sqstest.NewSender(sqstest.Endpoint(t)).SendBatch(context.Background(), q.URL, sqsjson.Messages(bodies...)); err != nil {
		t.Fatalf("send: %v", err)
	}
}

func bodies(msgs []events.SQSMessage) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Body)
	}
	slices.Sort(out)
	return out
}

// A received message is invisible until its visibility timeout passes, then
// comes again with its receive count up; a deleted one never comes again.
func TestVisibilityAndRedelivery(t *testing.T) {
	c := sqstest.NewClient(sqstest.Endpoint(t))
	q, _ := sqstest.NewQueueWithDLQ(t, c, time.Second, 5)
	send(t, q, "a", "b")
	first := sqstest.Receive(t, c, q, 10, time.Second)
	if got := bodies(first); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("received %v, want a and b", got)
	}
	if again := sqstest.Receive(t, c, q, 10, 0); len(again) != 0 {
		t.Fatalf("received %v while they are invisible", bodies(again))
	}
	// The function reports "b" failed: "a" is deleted, "b" comes back.
	var b events.SQSMessage
	for _, m := range first {
		if m.Body == "b" {
			b = m
		}
	}
	sqstest.Finish(t, c, q, first, events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{{ItemIdentifier: b.MessageId}}})
	second := sqstest.Receive(t, c, q, 10, 5*time.Second)
	if len(second) != 1 || second[0].Body != "b" || second[0].MessageId != b.MessageId || second[0].Attributes["ApproximateReceiveCount"] != "2" {
		t.Fatalf("redelivered %+v, want b once more, received twice", second)
	}
	sqstest.Finish(t, c, q, second, events.SQSEventResponse{})
	if rest := sqstest.Receive(t, c, q, 10, 2*time.Second); len(rest) != 0 {
		t.Errorf("after the deletes: %v", bodies(rest))
	}
}

// A message received maxReceiveCount times without being deleted moves to
// the dead-letter queue on the next receive.
func TestRedrive(t *testing.T) {
	c := sqstest.NewClient(sqstest.Endpoint(t))
	q, dlq := sqstest.NewQueueWithDLQ(t, c, time.Second, 2)
	send(t, q, "poison")
	for i := range 2 {
		if msgs := sqstest.Receive(t, c, q, 10, 3*time.Second); len(msgs) != 1 {
			t.Fatalf("receive %d: %d messages", i+1, len(msgs))
		}
	}
	if msgs := sqstest.Receive(t, c, q, 10, 3*time.Second); len(msgs) != 0 {
		t.Fatalf("a third receive got %v, want the message moved", bodies(msgs))
	}
	if got := sqstest.Drain(t, c, dlq); !slices.Equal(got, []string{"poison"}) {
		t.Errorf("the dead-letter queue has %v, want the message", got)
	}
}
