package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/tally-hq/tally/internal/httpapi"
	"github.com/tally-hq/tally/internal/service"
	"github.com/tally-hq/tally/internal/servicetest"
	"github.com/tally-hq/tally/internal/store"
)

// env is the API served over real HTTP on loopback.
type env struct {
	t   *testing.T
	svc *service.Service
	srv *httptest.Server
}

func newEnv(t *testing.T, st store.Store, cfg httpapi.Config, opts ...service.Option) *env {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	svc := servicetest.New(st, opts...)
	srv := httptest.NewServer(httpapi.New(svc.API(), cfg).Handler())
	t.Cleanup(srv.Close)
	return &env{t: t, svc: svc, srv: srv}
}

// brand creates a brand and a key; it returns both ids and the secret.
func (e *env) brand() (brandID, secret string) {
	e.t.Helper()
	ctx := context.Background()
	b, err := e.svc.Identity.CreateBrand(ctx, "Brand")
	if err != nil {
		e.t.Fatal(err)
	}
	_, secret, err = e.svc.Identity.CreateAPIKey(ctx, b.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return b.ID, secret
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

// field returns a top-level string field of a JSON object answer.
func (r response) field(t *testing.T, name string) string {
	t.Helper()
	var m map[string]any
	r.decode(t, &m)
	s, _ := m[name].(string)
	return s
}

// errorCode returns error.code of an error answer, or "".
func (r response) errorCode() string {
	var e struct{ Error struct{ Code string } }
	_ = json.Unmarshal(r.body, &e)
	return e.Error.Code
}

// call sends a request; body may be nil, a string (sent as is) or a value
// (sent as JSON).
func (e *env) call(method, path, secret string, body any) response {
	e.t.Helper()
	r, err := e.try(method, path, secret, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

// try is call for goroutines: it returns the error instead of failing.
func (e *env) try(method, path, secret string, body any) (response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = bytes.NewBufferString(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			return response{}, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		return response{}, err
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return e.send(req)
}

func (e *env) send(req *http.Request) (response, error) {
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, header: resp.Header, body: raw}, err
}

// must asserts the status of an answer and returns it.
func (e *env) must(status int, r response) response {
	e.t.Helper()
	if r.status != status {
		e.t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

// offer creates an offer from the defaults plus extra fields.
func (e *env) offer(secret string, extra map[string]any) string {
	e.t.Helper()
	body := map[string]any{"name": "Shoes", "destinationUrl": "https://shop.example/p", "revenueCents": 1000, "payoutCents": 300, "currency": "USD"}
	for k, v := range extra {
		body[k] = v
	}
	return e.must(201, e.call("POST", "/api/v1/offers", secret, body)).field(e.t, "id")
}

var emailSeq struct {
	sync.Mutex
	n int
}

// activePartner applies through the public form and approves the partner.
func (e *env) activePartner(brandID, secret string) string {
	e.t.Helper()
	emailSeq.Lock()
	emailSeq.n++
	email := fmt.Sprintf("partner%d@example.com", emailSeq.n)
	emailSeq.Unlock()
	id := e.must(201, e.call("POST", "/api/public/brands/"+brandID+"/applications", "", map[string]any{"name": "Pat", "email": email})).field(e.t, "id")
	e.must(200, e.call("POST", "/api/v1/partners/"+id+"/approve", secret, nil))
	return id
}

// raceCalls sends n requests at once, the i-th with body(i) (nil body: none),
// and returns the answers and how many had each status.
func (e *env) raceCalls(n int, method, path, key string, body func(i int) any) ([]response, map[int]int) {
	e.t.Helper()
	answers := make([]response, n)
	errs := make([]error, n)
	var ready, done sync.WaitGroup
	startGun := make(chan struct{})
	for i := range n {
		ready.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			var b any
			if body != nil {
				b = body(i)
			}
			ready.Done()
			<-startGun
			answers[i], errs[i] = e.try(method, path, key, b)
		}()
	}
	ready.Wait()
	close(startGun)
	done.Wait()
	statuses := map[int]int{}
	for i, a := range answers {
		if errs[i] != nil {
			e.t.Fatal(errs[i])
		}
		statuses[a.status]++
	}
	return answers, statuses
}
