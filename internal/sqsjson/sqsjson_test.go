package sqsjson_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/sqstest"
)

func TestMain(m *testing.M) { sqstest.Main(m) }

// The calls work on fauxqs (SQS's JSON protocol): a batch is queued whole,
// the backlog counts it, and with no endpoint set the client finds the
// service at the queue URL's host. (fauxqs' queue URLs are on
// sqs.<region>.localhost, which Go does not resolve: the test puts them on
// fauxqs' address, as an SQS queue URL is on SQS's.)
func TestSendAndBacklog(t *testing.T) {
	endpoint := sqstest.Endpoint(t)
	sdk := sqstest.NewClient(endpoint)
	q := sqstest.NewQueue(t, sdk, nil)
	u, err := url.Parse(q.URL)
	if err != nil {
		t.Fatal(err)
	}
	onEndpoint := endpoint + u.Path
	cfg := aws.Config{Region: sqstest.Region, Credentials: credentials.NewStaticCredentialsProvider("tally", "tally", "")}
	for name, c := range map[string]*sqsjson.Client{
		"endpoint":  sqsjson.New(cfg, aws.String(endpoint)),
		"queue URL": sqsjson.New(cfg, nil),
	} {
		sent := []string{`{"n":1}`, `{"n":2}`, "three ✓"}
		msgs := sqsjson.Messages(sent...)
		msgs[1].Group = "brd_01kaqj3f8v5m2w7x9c4d6e8g0h" // a standard queue takes groups (fair queues)
		if err := c.SendBatch(t.Context(), onEndpoint, msgs); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		n, err := c.ApproximateNumberOfMessages(t.Context(), onEndpoint)
		if err != nil || n != 3 {
			t.Fatalf("%s: backlog %d, %v; want 3", name, n, err)
		}
		got := sqstest.Drain(t, sdk, q)
		slices.Sort(got)
		slices.Sort(sent)
		if !slices.Equal(got, sent) {
			t.Fatalf("%s: received %q, want %q", name, got, sent)
		}
	}
}

// SQS's answers to a call it refuses become errors with its code; a batch
// with refused entries, a *Refused naming them; neither is retried.
func TestErrors(t *testing.T) {
	endpoint := sqstest.Endpoint(t)
	c := sqstest.NewSender(endpoint)
	err := c.SendBatch(t.Context(), endpoint+"/000000000000/no-such-queue", sqsjson.Messages("x"))
	var e *sqsjson.Error
	if !errors.As(err, &e) || e.Code != "QueueDoesNotExist" || e.Status != http.StatusBadRequest {
		t.Fatalf("send to a missing queue: %v, want QueueDoesNotExist (400)", err)
	}
	if _, err := c.ApproximateNumberOfMessages(t.Context(), endpoint+"/000000000000/no-such-queue"); !errors.As(err, &e) || e.Code != "QueueDoesNotExist" {
		t.Fatalf("backlog of a missing queue: %v", err)
	}
	for _, n := range []int{0, sqsjson.MaxBatch + 1} {
		if err := c.SendBatch(t.Context(), endpoint+"/q", sqsjson.Messages(make([]string, n)...)); err == nil {
			t.Errorf("a batch of %d sent", n)
		}
	}

	srv := newScripted(t, answer{http.StatusOK, `{"Successful":[{"Id":"0"}],"Failed":[{"Id":"1","Code":"InternalError","Message":"Try again.","SenderFault":false}]}`})
	err = sqstest.NewSender(srv.URL).SendBatch(t.Context(), srv.URL+"/1/q", sqsjson.Messages("a", "b"))
	var r *sqsjson.Refused
	if !errors.As(err, &r) || r.Of != 2 || len(r.Failed) != 1 || r.Failed[0].ID != "1" || r.Failed[0].Code != "InternalError" {
		t.Fatalf("a batch with a refused entry: %v", err)
	}
	if srv.calls() != 1 {
		t.Errorf("%d calls for a refused entry, want 1 (the caller decides)", srv.calls())
	}
}

// Transport errors, 5xx and throttling are retried, up to 3 attempts in
// all; other errors are not.
func TestRetries(t *testing.T) {
	ok := answer{http.StatusOK, `{"Successful":[{"Id":"0"}],"Failed":[]}`}
	unavailable := answer{http.StatusServiceUnavailable, `{"__type":"com.amazonaws.sqs#ServiceUnavailable","message":"Down."}`}
	throttled := answer{http.StatusBadRequest, `{"__type":"com.amazonaws.sqs#ThrottlingException","message":"Slow down."}`}
	denied := answer{http.StatusBadRequest, `{"__type":"com.amazon.coral.service#AccessDeniedException","message":"No."}`}
	for _, c := range []struct {
		name      string
		answers   []answer
		wantCalls int
		wantCode  string // "" is success
	}{
		{"unavailable twice", []answer{unavailable, unavailable, ok}, 3, ""},
		{"throttled once", []answer{throttled, ok}, 2, ""},
		{"unavailable thrice", []answer{unavailable, unavailable, unavailable, ok}, 3, "ServiceUnavailable"},
		{"access denied", []answer{denied, ok}, 1, "AccessDeniedException"},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newScripted(t, c.answers...)
			err := sqstest.NewSender(srv.URL).SendBatch(t.Context(), srv.URL+"/1/q", sqsjson.Messages("a"))
			var e *sqsjson.Error
			switch {
			case c.wantCode == "" && err != nil:
				t.Fatalf("send: %v", err)
			case c.wantCode != "" && (!errors.As(err, &e) || e.Code != c.wantCode):
				t.Fatalf("send: %v, want %s", err, c.wantCode)
			}
			if srv.calls() != c.wantCalls {
				t.Errorf("%d calls, want %d", srv.calls(), c.wantCalls)
			}
		})
	}
	// Nothing listens: three attempts, then the transport's error.
	start := time.Now()
	if err := sqstest.NewSender("http://127.0.0.1:1").SendBatch(t.Context(), "http://127.0.0.1:1/1/q", sqsjson.Messages("a")); err == nil {
		t.Fatal("sent with nothing listening")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the retries took %v", d)
	}
}

// A request is signed with Signature Version 4 for the service "sqs" over
// the headers that say what it is, with the session token: the signature
// the server can compute from what it received matches the one sent.
func TestSigned(t *testing.T) {
	var got *http.Request
	var body []byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ = io.ReadAll(r.Body)
		got = r
		io.WriteString(w, `{"Attributes":{"ApproximateNumberOfMessages":"7"}}`)
	}))
	t.Cleanup(srv.Close)
	creds := aws.Credentials{AccessKeyID: "AKIDEXAMPLE", SecretAccessKey: "secret", SessionToken: "token"}
	cfg := aws.Config{Region: "eu-west-3", Credentials: credentials.StaticCredentialsProvider{Value: creds}}
	n, err := sqsjson.New(cfg, aws.String(srv.URL)).ApproximateNumberOfMessages(t.Context(), srv.URL+"/123456789012/q")
	if err != nil || n != 7 {
		t.Fatalf("backlog %d, %v", n, err)
	}
	auth := got.Header.Get("Authorization")
	for _, want := range []string{"AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/", "/eu-west-3/sqs/aws4_request", "SignedHeaders=content-length;content-type;host;x-amz-date;x-amz-security-token;x-amz-target,"} {
		if !strings.Contains(auth, want) {
			t.Errorf("Authorization %q lacks %q", auth, want)
		}
	}
	if got.Header.Get("X-Amz-Security-Token") != "token" || got.Header.Get("X-Amz-Target") != "AmazonSQS.GetQueueAttributes" || got.Header.Get("Content-Type") != "application/x-amz-json-1.0" {
		t.Errorf("headers %v", got.Header)
	}
	// Sign what the server received, at the time it says, as SQS checks it.
	at, err := time.Parse("20060102T150405Z", got.Header.Get("X-Amz-Date"))
	if err != nil {
		t.Fatal(err)
	}
	again, _ := http.NewRequest(got.Method, srv.URL+got.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range []string{"Content-Type", "X-Amz-Target"} {
		again.Header.Set(h, got.Header.Get(h))
	}
	sum := sha256Hex(body)
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, sum, "sqs", "eu-west-3", at); err != nil {
		t.Fatal(err)
	}
	if again.Header.Get("Authorization") != auth {
		t.Errorf("signature of what was received:\n%s\nsent:\n%s", again.Header.Get("Authorization"), auth)
	}
}

// answer is a scripted server's answer.
type answer struct {
	status int
	body   string
}

// scripted answers its calls with answers in order (the last one again
// once they run out).
type scripted struct {
	*httptest.Server
	mu sync.Mutex
	n  int
}

func newScripted(t *testing.T, answers ...answer) *scripted {
	s := &scripted{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		a := answers[min(s.n, len(answers)-1)]
		s.n++
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(a.status)
		io.WriteString(w, a.body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
