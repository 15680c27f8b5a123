// Package sqstest gives tests an SQS to talk to: fauxqs, an emulator that
// speaks the JSON protocol aws-sdk-go-v2's SQS client uses (queues with a
// redrive policy, batches, long polling, visibility timeouts, receive
// counts, moves to the dead-letter queue). `scripts/fauxqs.sh fetch` (which
// scripts/test.sh runs) puts it in .cache/fauxqs; the test binary starts it
// once, on loopback, when a test first asks for it, and Main stops it.
// Without it a test is skipped, or fails when the CI variable is set, as
// with package dynamotest.
//
// A package whose tests use it calls Main from its TestMain (which also
// stops what package dynamotest started):
//
//	func TestMain(m *testing.M) { sqstest.Main(m) }
//
// What fauxqs does not do: it never expires a message (MessageRetentionPeriod
// is accepted and ignored), and it checks no credentials or permissions.
package sqstest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/tally-hq/tally/internal/dynamotest"
	"github.com/tally-hq/tally/internal/reporoot"
	"github.com/tally-hq/tally/internal/sqsjson"
)

// Region is the region of the test queues' ARNs and URLs.
const Region = "us-east-1"

// startTimeout bounds how long fauxqs may take to listen; it needs about a
// second.
const startTimeout = 30 * time.Second

//go:embed launch.mjs
var launcher []byte

var (
	inMain bool

	once  sync.Once
	local struct {
		endpoint string
		missing  string
		err      error
		cmd      *exec.Cmd
		exited   chan error
	}
)

// Main runs the tests, then stops fauxqs and the DynamoDB Local of package
// dynamotest, if they were started.
func Main(m *testing.M) {
	inMain = true
	code := dynamotest.Run(m)
	stop()
	os.Exit(code)
}

// Endpoint returns fauxqs' URL, starting it once per test binary.
func Endpoint(t testing.TB) string {
	t.Helper()
	if !inMain {
		t.Fatal("sqstest: call sqstest.Main from TestMain, so that the fauxqs this test starts is stopped")
	}
	once.Do(start)
	switch {
	case local.missing != "":
		reporoot.Missing(t, local.missing)
	case local.err != nil:
		t.Fatal(local.err)
	}
	return local.endpoint
}

func start() {
	root, err := reporoot.Find()
	if err != nil {
		local.err = err
		return
	}
	node := filepath.Join(root, ".cache", "local-sfn", "node_modules", ".bin", "node")
	dir := filepath.Join(root, ".cache", "fauxqs", "node_modules", "fauxqs")
	for _, p := range []string{node, filepath.Join(dir, "dist", "app.js")} {
		if _, err := os.Stat(p); err != nil {
			local.missing = fmt.Sprintf("sqstest: no %s: run `./scripts/fauxqs.sh fetch` first", p)
			return
		}
	}
	script, err := os.CreateTemp("", "sqstest-*.mjs")
	if err != nil {
		local.err = err
		return
	}
	defer os.Remove(script.Name()) // node has read it once it prints its address
	if _, err := script.Write(launcher); err != nil {
		local.err = err
		return
	}
	script.Close()

	cmd := exec.Command(node, "--disable-warning=ExperimentalWarning", script.Name(), dir, "0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		local.err = err
		return
	}
	cmd.SysProcAttr = dynamotest.ProcAttr()
	if err := cmd.Start(); err != nil {
		local.err = fmt.Errorf("sqstest: start fauxqs: %w", err)
		return
	}
	local.cmd, local.exited = cmd, make(chan error, 1)
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		for sc.Scan() { // keep the pipe drained
		}
		local.exited <- cmd.Wait()
	}()
	select {
	case line, ok := <-lines:
		var out struct{ Address string }
		if !ok || json.Unmarshal([]byte(line), &out) != nil || !strings.HasPrefix(out.Address, "http://127.0.0.1:") {
			stop()
			local.err = fmt.Errorf("sqstest: fauxqs did not say where it listens (%q):\n%s", line, stderr.String())
			return
		}
		local.endpoint = out.Address
	case <-time.After(startTimeout):
		stop()
		local.err = fmt.Errorf("sqstest: fauxqs did not listen within %v:\n%s", startTimeout, stderr.String())
	}
}

func stop() {
	if local.cmd == nil {
		return
	}
	local.cmd.Process.Kill() // the fauxqs this binary started, by its pid
	<-local.exited
	local.cmd = nil
}

// NewClient returns an SQS client for endpoint (fauxqs, or a proxy in front
// of it) with the region and dummy credentials fauxqs takes. opts adjust it.
func NewClient(endpoint string, opts ...func(*sqs.Options)) *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("tally", "tally", ""),
		BaseEndpoint: aws.String(endpoint),
	}, opts...)
}

// NewSender returns the SQS client of Tally's functions (internal/sqsjson)
// for endpoint (fauxqs, or a proxy in front of it), with the region and
// dummy credentials fauxqs takes.
func NewSender(endpoint string, opts ...sqsjson.Option) *sqsjson.Client {
	cfg := aws.Config{Region: Region, Credentials: credentials.NewStaticCredentialsProvider("tally", "tally", "")}
	return sqsjson.New(cfg, aws.String(endpoint), opts...)
}

// Queue is a queue made for one test.
type Queue struct {
	URL, ARN string
}

var unsafeChars = regexp.MustCompile(`[^a-zA-Z0-9_-]+`)

// NewQueue creates a queue with attrs (SQS's queue attributes) whose name
// shows the test that made it, and deletes it when the test ends.
func NewQueue(t testing.TB, c *sqs.Client, attrs map[string]string) Queue {
	t.Helper()
	name := strings.Trim(unsafeChars.ReplaceAllString(t.Name(), "_"), "_")
	name = name[:min(len(name), 60)] + "_" + rand.Text()[:12]
	ctx := context.Background()
	out, err := c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("sqstest: create queue %s: %v", name, err)
	}
	q := Queue{URL: aws.ToString(out.QueueUrl)}
	got, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: out.QueueUrl, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
	if err != nil {
		t.Fatalf("sqstest: queue %s: %v", name, err)
	}
	q.ARN = got.Attributes[string(types.QueueAttributeNameQueueArn)]
	t.Cleanup(func() {
		if _, err := c.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: out.QueueUrl}); err != nil {
			t.Errorf("sqstest: delete queue %s: %v", name, err)
		}
	})
	return q
}

// NewQueueWithDLQ creates a queue that moves a message to its own
// dead-letter queue after maxReceives receives, with the visibility timeout
// given.
func NewQueueWithDLQ(t testing.TB, c *sqs.Client, visibility time.Duration, maxReceives int) (queue, dlq Queue) {
	t.Helper()
	dlq = NewQueue(t, c, nil)
	redrive, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlq.ARN, "maxReceiveCount": maxReceives})
	queue = NewQueue(t, c, map[string]string{
		"VisibilityTimeout": strconv.Itoa(int(visibility.Seconds())),
		"RedrivePolicy":     string(redrive),
	})
	return queue, dlq
}

// Receive takes up to max messages (at most 10) as Lambda's SQS event
// source does, long-polling up to wait for the first, and returns them as
// the records of the Lambda event. The event source mapping itself is not
// emulated: Finish does its part after the function ran.
func Receive(t testing.TB, c *sqs.Client, q Queue, max int, wait time.Duration) []events.SQSMessage {
	t.Helper()
	out, err := c.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{
		QueueUrl: aws.String(q.URL), MaxNumberOfMessages: int32(max), WaitTimeSeconds: int32(wait.Seconds()),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatalf("sqstest: receive from %s: %v", q.URL, err)
	}
	msgs := make([]events.SQSMessage, len(out.Messages))
	for i, m := range out.Messages {
		msgs[i] = events.SQSMessage{
			MessageId: aws.ToString(m.MessageId), ReceiptHandle: aws.ToString(m.ReceiptHandle), Body: aws.ToString(m.Body),
			Md5OfBody: aws.ToString(m.MD5OfBody), Attributes: m.Attributes, EventSource: "aws:sqs", EventSourceARN: q.ARN, AWSRegion: Region,
		}
	}
	return msgs
}

// ReceiveN receives until n messages have come or a receive that waited
// comes back empty: one receive may return fewer messages than the queue
// holds (SQS samples its servers; fauxqs does so under load too).
func ReceiveN(t testing.TB, c *sqs.Client, q Queue, n int, wait time.Duration) []events.SQSMessage {
	t.Helper()
	var msgs []events.SQSMessage
	for len(msgs) < n {
		got := Receive(t, c, q, min(n-len(msgs), 10), wait)
		if len(got) == 0 {
			break
		}
		msgs = append(msgs, got...)
	}
	return msgs
}

// Finish does what Lambda's SQS event source does after the function
// answered a batch with a partial batch response: it deletes the messages
// that are not reported as failures; the others become visible again after
// the visibility timeout.
func Finish(t testing.TB, c *sqs.Client, q Queue, msgs []events.SQSMessage, resp events.SQSEventResponse) {
	t.Helper()
	failed := map[string]bool{}
	for _, f := range resp.BatchItemFailures {
		failed[f.ItemIdentifier] = true
	}
	for _, m := range msgs {
		if failed[m.MessageId] {
			continue
		}
		if _, err := c.DeleteMessage(context.Background(), &sqs.DeleteMessageInput{QueueUrl: aws.String(q.URL), ReceiptHandle: aws.String(m.ReceiptHandle)}); err != nil {
			t.Fatalf("sqstest: delete message %s: %v", m.MessageId, err)
		}
	}
}

// Drain receives every message waiting in q now, deletes it and returns
// the bodies, in the order received.
func Drain(t testing.TB, c *sqs.Client, q Queue) []string {
	t.Helper()
	var bodies []string
	for {
		msgs := Receive(t, c, q, 10, 0)
		if len(msgs) == 0 {
			return bodies
		}
		for _, m := range msgs {
			bodies = append(bodies, m.Body)
		}
		Finish(t, c, q, msgs, events.SQSEventResponse{})
	}
}
