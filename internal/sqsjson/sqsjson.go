// Package sqsjson is the SQS client of Tally's Lambda functions: the
// calls they make (SendMessageBatch, GetQueueAttributes, and the
// reconciler's ReceiveMessage and DeleteMessage) over SQS's JSON protocol
// (package awsjson: the SDK's SQS client adds 330 KB to a function; the
// deliveries function, an API function that queues manual retries, went
// over its 8.5 MiB budget with it). It retries as the SDK's standard
// retryer does (3 attempts); a retried send may queue a message twice,
// which the pipeline tolerates (every stage is idempotent), as it does
// with the SDK.
package sqsjson

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/tally-hq/tally/internal/awsjson"
)

// MaxBatch is SendMessageBatch's most entries per call.
const MaxBatch = 10

// Client calls SQS.
type Client struct {
	endpoint string // base URL; "" is the queue URL's scheme and host
	json     *awsjson.Client
	attempts int
}

// Option adjusts a Client.
type Option func(*Client)

// Attempts sets how many times a call is tried (1: no retry; default 3).
func Attempts(n int) Option { return func(c *Client) { c.attempts = n } }

// New returns a client with cfg's region and credentials. endpoint is the
// service's URL (an emulator's, AWS_ENDPOINT_URL_SQS); nil or "" sends
// each request to its queue URL's host, which is SQS's endpoint in every
// partition (https://sqs.<region>.amazonaws.com/<account>/<name>).
func New(cfg aws.Config, endpoint *string, opts ...Option) *Client {
	c := &Client{endpoint: strings.TrimSuffix(aws.ToString(endpoint), "/"), attempts: 3}
	for _, o := range opts {
		o(c)
	}
	c.json = awsjson.New(cfg, awsjson.Protocol{Service: "sqs", Target: "AmazonSQS", ContentType: "application/x-amz-json-1.0"}, c.attempts)
	return c
}

// Error is an error SQS answered.
type Error = awsjson.Error

// Refused is the entries of a batch that SQS did not queue.
type Refused struct {
	Failed []Failure
	Of     int // entries sent
}

// Failure is one refused entry.
type Failure struct {
	ID, Code, Message string
	SenderFault       bool
}

func (r *Refused) Error() string {
	return fmt.Sprintf("%d of %d messages refused, first: %s: %s", len(r.Failed), r.Of, r.Failed[0].Code, r.Failed[0].Message)
}

// Message is a message to send. Group is its message group (empty: none):
// on a standard queue, the tenant that SQS fair queues balance the
// delivery of messages across. Delay keeps it from being received until
// then (DelaySeconds: whole seconds, at most 15 minutes; 0: the queue's).
type Message struct {
	Body, Group string
	Delay       time.Duration
}

// MaxDelay is the longest Delay SQS takes.
const MaxDelay = 15 * time.Minute

// Messages are messages with bodies and no group.
func Messages(bodies ...string) []Message {
	out := make([]Message, len(bodies))
	for i, b := range bodies {
		out[i].Body = b
	}
	return out
}

// SendBatch queues msgs (at most MaxBatch) in one SendMessageBatch call.
// It returns a *Refused when SQS refused some of them: the others are
// queued.
func (c *Client) SendBatch(ctx context.Context, queueURL string, msgs []Message) error {
	if len(msgs) == 0 || len(msgs) > MaxBatch {
		return fmt.Errorf("sqs SendMessageBatch: %d messages, want 1 to %d", len(msgs), MaxBatch)
	}
	type entry struct {
		ID             string `json:"Id"`
		MessageBody    string `json:"MessageBody"`
		MessageGroupID string `json:"MessageGroupId,omitempty"`
		DelaySeconds   int    `json:"DelaySeconds,omitempty"`
	}
	in := struct {
		QueueURL string  `json:"QueueUrl"`
		Entries  []entry `json:"Entries"`
	}{QueueURL: queueURL}
	for i, m := range msgs {
		in.Entries = append(in.Entries, entry{ID: strconv.Itoa(i), MessageBody: m.Body, MessageGroupID: m.Group, DelaySeconds: int(min(m.Delay, MaxDelay).Seconds())})
	}
	var out struct {
		Failed []struct {
			ID          string `json:"Id"`
			Code        string `json:"Code"`
			Message     string `json:"Message"`
			SenderFault bool   `json:"SenderFault"`
		} `json:"Failed"`
	}
	if err := c.call(ctx, "SendMessageBatch", queueURL, in, &out); err != nil {
		return err
	}
	if len(out.Failed) == 0 {
		return nil
	}
	r := &Refused{Of: len(msgs)}
	for _, f := range out.Failed {
		r.Failed = append(r.Failed, Failure{ID: f.ID, Code: f.Code, Message: f.Message, SenderFault: f.SenderFault})
	}
	return r
}

// ApproximateNumberOfMessages returns the queue's attribute of that name:
// about how many messages wait to be received.
func (c *Client) ApproximateNumberOfMessages(ctx context.Context, queueURL string) (int, error) {
	const name = "ApproximateNumberOfMessages"
	in := struct {
		QueueURL       string   `json:"QueueUrl"`
		AttributeNames []string `json:"AttributeNames"`
	}{queueURL, []string{name}}
	var out struct {
		Attributes map[string]string `json:"Attributes"`
	}
	if err := c.call(ctx, "GetQueueAttributes", queueURL, in, &out); err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(out.Attributes[name])
	if err != nil {
		return 0, fmt.Errorf("sqs GetQueueAttributes: %s is %q", name, out.Attributes[name])
	}
	return n, nil
}

// Received is a message received: its body, and the handle that deletes
// it.
type Received struct {
	Body          string `json:"Body"`
	ReceiptHandle string `json:"ReceiptHandle"`
}

// Receive receives up to n messages (1 to MaxBatch) without waiting for
// any, each hidden from other receivers for visibility (whole seconds).
func (c *Client) Receive(ctx context.Context, queueURL string, n int, visibility time.Duration) ([]Received, error) {
	in := struct {
		QueueURL            string `json:"QueueUrl"`
		MaxNumberOfMessages int    `json:"MaxNumberOfMessages"`
		VisibilityTimeout   int    `json:"VisibilityTimeout"`
		WaitTimeSeconds     int    `json:"WaitTimeSeconds"`
	}{queueURL, min(max(n, 1), MaxBatch), int(visibility.Seconds()), 0}
	var out struct {
		Messages []Received `json:"Messages"`
	}
	err := c.call(ctx, "ReceiveMessage", queueURL, in, &out)
	return out.Messages, err
}

// Delete deletes a received message.
func (c *Client) Delete(ctx context.Context, queueURL, receiptHandle string) error {
	in := struct {
		QueueURL      string `json:"QueueUrl"`
		ReceiptHandle string `json:"ReceiptHandle"`
	}{queueURL, receiptHandle}
	return c.call(ctx, "DeleteMessage", queueURL, in, nil)
}

// call makes one operation's request, retried.
func (c *Client) call(ctx context.Context, op, queueURL string, in, out any) error {
	endpoint := c.endpoint
	if endpoint == "" {
		u, err := url.Parse(queueURL)
		if err != nil || u.Scheme == "" || u.Host == "" {
			return fmt.Errorf("sqs %s: the queue URL %q has no scheme and host", op, queueURL)
		}
		endpoint = u.Scheme + "://" + u.Host
	}
	return c.json.Call(ctx, endpoint+"/", op, in, out)
}
