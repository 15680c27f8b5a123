package lambdafn_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/tally-hq/tally/internal/sqsjson"
	"github.com/tally-hq/tally/internal/sqstest"
)

// testQueue is a delivery queue (and its dead-letter queue) in fauxqs,
// reached through a proxy that counts the SendMessageBatch calls and, when
// told, refuses them. The refusals are the stand-in part: nothing makes a
// real queue refuse a call or an entry on purpose.
type testQueue struct {
	sqstest.Queue
	DLQ    sqstest.Queue
	client *sqsjson.Client // the functions' client, through the proxy, without retries: each call counts once
	direct *sqs.Client     // the SDK's, to fauxqs itself
	proxy  string          // the proxy's URL, for AWS_ENDPOINT_URL_SQS

	mu       sync.Mutex
	calls    []sendCall
	refusing refusal
	from     int      // refusing applies from this call on (index into calls)
	received []string // bodies drained from the queue so far
}

// sendCall is one SendMessageBatch request the proxy saw.
type sendCall struct {
	QueueURL string `json:"QueueUrl"`
	Entries  []struct {
		ID             string `json:"Id"`
		MessageBody    string `json:"MessageBody"`
		MessageGroupID string `json:"MessageGroupId"`
	} `json:"Entries"`
}

// refusal is how the proxy answers SendMessageBatch.
type refusal int

const (
	accept     refusal = iota
	down               // the call fails: 503 ServiceUnavailable
	refuseLast         // every entry but the last is queued; the last is reported failed
	refuseAll          // no entry is queued; all are reported failed
)

// newTestQueue makes the queues, with the deployed visibility timeout
// (180 s: a received message stays taken for the test) and redrive (5
// receives).
func newTestQueue(t *testing.T) *testQueue {
	t.Helper()
	endpoint := sqstest.Endpoint(t)
	q := &testQueue{direct: sqstest.NewClient(endpoint)}
	q.Queue, q.DLQ = sqstest.NewQueueWithDLQ(t, q.direct, 180*time.Second, 5)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { q.serve(w, r, endpoint) }))
	t.Cleanup(srv.Close)
	q.proxy = srv.URL
	q.client = sqstest.NewSender(srv.URL, sqsjson.Attempts(1))
	return q
}

func (q *testQueue) serve(w http.ResponseWriter, r *http.Request, endpoint string) {
	body, _ := io.ReadAll(r.Body)
	if r.Header.Get("X-Amz-Target") == "AmazonSQS.SendMessageBatch" {
		var call sendCall
		json.Unmarshal(body, &call)
		q.mu.Lock()
		q.calls = append(q.calls, call)
		mode := accept
		if len(q.calls)-1 >= q.from {
			mode = q.refusing
		}
		q.mu.Unlock()
		var failed []map[string]any
		refused := func(id string) map[string]any {
			return map[string]any{"Id": id, "Code": "InternalError", "Message": "Try again.", "SenderFault": false}
		}
		switch mode {
		case down:
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"__type":"com.amazonaws.sqs#ServiceUnavailable","message":"The service is unavailable."}`)
			return
		case refuseAll:
			for _, e := range call.Entries {
				failed = append(failed, refused(e.ID))
			}
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			json.NewEncoder(w).Encode(map[string]any{"Successful": []any{}, "Failed": failed})
			return
		case refuseLast:
			var raw map[string]any
			json.Unmarshal(body, &raw)
			entries := raw["Entries"].([]any)
			raw["Entries"] = entries[:len(entries)-1]
			failed = append(failed, refused(call.Entries[len(entries)-1].ID))
			body, _ = json.Marshal(raw)
		}
		if len(call.Entries) == len(failed) {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			json.NewEncoder(w).Encode(map[string]any{"Successful": []any{}, "Failed": failed})
			return
		}
		status, out := forward(r, endpoint, body)
		if failed != nil && status == http.StatusOK {
			var resp map[string]any
			json.Unmarshal(out, &resp)
			resp["Failed"] = failed
			out, _ = json.Marshal(resp)
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(status)
		w.Write(out)
		return
	}
	status, out := forward(r, endpoint, body)
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.WriteHeader(status)
	w.Write(out)
}

// forward sends the request, with body, on to fauxqs.
func forward(r *http.Request, endpoint string, body []byte) (int, []byte) {
	req, _ := http.NewRequest(r.Method, endpoint+r.URL.RequestURI(), bytes.NewReader(body))
	for _, h := range []string{"Content-Type", "X-Amz-Target", "Authorization", "X-Amz-Date"} {
		req.Header.Set(h, r.Header.Get(h))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return http.StatusBadGateway, []byte(`{"__type":"InternalError","message":` + strconv.Quote(err.Error()) + `}`)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// refuseFrom answers the SendMessageBatch calls from number n on (1-based,
// counted from now) as mode says; earlier ones are accepted.
func (q *testQueue) refuseFrom(n int, mode refusal) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.refusing, q.from = mode, len(q.calls)+n-1
}

func (q *testQueue) callCount() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.calls)
}

func (q *testQueue) sendCalls() []sendCall {
	q.mu.Lock()
	defer q.mu.Unlock()
	return slices.Clone(q.calls)
}

// messages returns the bodies of every message queued so far, in the order
// they were taken off the queue (each call takes the new ones).
func (q *testQueue) messages(t *testing.T) []string {
	t.Helper()
	bodies := sqstest.Drain(t, q.direct, q.Queue)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.received = append(q.received, bodies...)
	return slices.Clone(q.received)
}
