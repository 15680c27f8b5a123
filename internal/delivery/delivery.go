// Package delivery makes one webhook delivery attempt: one signed POST to a
// receiver, its outcome recorded as a tally.Attempt. It is the step every
// transport (the local server, the SQS Lambda, the Step Functions task)
// calls; it does not touch storage, and scheduling retries is the caller's
// business.
//
// The rules (service spec sections 5 and 6, DESIGN "Delivery"):
//
//   - POST with Content-Type: application/json, User-Agent Tally-Webhooks/1,
//     X-Tally-Event, X-Tally-Webhook-Id and, when the subscription has a
//     secret, X-Tally-Signature (or, for the standard-webhooks scheme,
//     webhook-id, webhook-timestamp and webhook-signature) signed afresh
//     with the current time; a traceparent when the event kept the trace
//     of its request.
//   - Only a 2xx answer succeeds. Redirects are not followed.
//   - The whole attempt (connect, TLS, headers, reading the body) is bounded
//     by one timeout, 10 s by default.
//   - Certificates are verified; the proxy environment is ignored.
//   - The SSRF guard checks the IP address actually being dialed and refuses
//     private, loopback (except on the local server), link-local, metadata
//     and other reserved addresses.
package delivery

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/tally-hq/tally"
	"github.com/tally-hq/tally/internal/outgoing"
	"github.com/tally-hq/tally/internal/ssrf"
)

// DefaultTimeout is the longest the service waits for a receiver (spec §6).
const DefaultTimeout = 10 * time.Second

// MaxResponseBytes is how much of the receiver's body an Attempt keeps.
const MaxResponseBytes = 4 << 10

// Connection pool sizes of the shared transport. Deliveries to one receiver
// reuse connections; the local pipeline sends thousands per second, up to
// 256 at once to one endpoint that answers quickly. With fewer idle
// connections kept per receiver than that, a burst dialled a new
// connection for one delivery in nine and closed it after (a tenth of the
// deliveries' CPU, on both sides, went to connecting).
const (
	maxIdleConns        = 512
	maxIdleConnsPerHost = 256
	idleConnTimeout     = 30 * time.Second
)

// Options configure a Sender. The zero value is the cloud's configuration.
type Options struct {
	// Timeout bounds the whole attempt: connecting, TLS, sending, waiting
	// for the headers and reading the body. <= 0 means DefaultTimeout.
	Timeout time.Duration
	// AllowLoopback lets deliveries reach 127.0.0.0/8 and ::1, over https or
	// plain http: the local server, where developers run their receivers.
	AllowLoopback bool
	// Now is the clock for Attempt.At and the signature's timestamp; nil
	// means time.Now. Latency is always measured on the monotonic clock.
	Now func() time.Time
}

// Sender makes delivery attempts. It holds one shared connection pool and
// is safe for concurrent use; make one per process.
type Sender struct {
	timeout       time.Duration
	allowLoopback bool
	now           func() time.Time
	// Tests may set tlsConfig.RootCAs and the dialers' Resolver before the
	// first Send.
	tlsConfig   *tls.Config
	tlsDialer   *net.Dialer // https: the SSRF guard
	plainDialer *net.Dialer // http: loopback only, and only when allowed
	transport   *http.Transport
	client      *http.Client
}

// NewSender returns a Sender configured by o.
func NewSender(o Options) *Sender {
	s := &Sender{
		timeout:       o.Timeout,
		allowLoopback: o.AllowLoopback,
		now:           o.Now,
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.tlsConfig = &tls.Config{
		MinVersion:         tls.VersionTLS12,
		NextProtos:         []string{"h2", "http/1.1"},
		ClientSessionCache: tls.NewLRUClientSessionCache(256),
	}
	// The dial (and TLS handshake) outlives a cancelled request inside
	// net/http, so it gets its own bound.
	s.tlsDialer = &net.Dialer{Timeout: s.timeout, KeepAlive: 30 * time.Second, Control: ssrf.Control(s.allowLoopback, false)}
	s.plainDialer = &net.Dialer{Timeout: s.timeout, KeepAlive: 30 * time.Second, Control: ssrf.Control(s.allowLoopback, true)}
	s.transport = &http.Transport{
		Proxy: nil, // never a proxy: the SSRF guard must see the real destination
		// DialContext serves http:// URLs only (https goes through
		// DialTLSContext), so plain http is held to loopback.
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return s.plainDialer.DialContext(ctx, network, addr)
		},
		DialTLSContext:         s.dialTLS,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           maxIdleConns,
		MaxIdleConnsPerHost:    maxIdleConnsPerHost,
		IdleConnTimeout:        idleConnTimeout,
		MaxResponseHeaderBytes: 64 << 10,
	}
	s.client = &http.Client{
		Transport: s.transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a 3xx is the answer, and a failure
		},
	}
	return s
}

// CloseIdleConnections closes the pool's idle connections.
func (s *Sender) CloseIdleConnections() { s.transport.CloseIdleConnections() }

// tlsError marks a failure of the TLS handshake (as opposed to the TCP dial
// before it), so that Send can report tally.AttemptTLS.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return "tls handshake: " + e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

// dialTLS dials through d (and so through the SSRF guard), then runs the TLS
// handshake with certificate verification against the system roots.
func (s *Sender) dialTLS(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	raw, err := s.tlsDialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	cfg := s.tlsConfig.Clone()
	cfg.ServerName = host
	conn := tls.Client(raw, cfg)
	_ = raw.SetDeadline(time.Now().Add(s.timeout))
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &tlsError{err}
	}
	_ = raw.SetDeadline(time.Time{})
	return conn, nil
}

// Send makes one attempt to deliver r and reports how it went. It never
// returns an error: every outcome is an Attempt. StatusCode is set whenever
// the receiver answered; Error names the failure when no answer came (or,
// with StatusCode set, when reading the answer's body failed). If ctx is
// cancelled (not timed out) the attempt says network; a caller shutting
// down should not record it.
func (s *Sender) Send(ctx context.Context, r outgoing.Request) (a tally.Attempt) {
	now := s.now()
	a.At = tally.NewTime(now)
	start := time.Now()
	defer func() { a.LatencyMs = time.Since(start).Milliseconds() }()

	if err := ssrf.Check(r.URL, s.allowLoopback); err != nil {
		a.Error = tally.AttemptBlocked
		return a
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r.Method = r.MethodOrPost()
	var body io.Reader
	if r.Method == http.MethodPost {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		a.Error = tally.AttemptBlocked // ssrf.Check passed, so this does not happen
		return a
	}
	if err := r.SetHeader(req.Header, now); err != nil {
		a.Error = tally.AttemptNetwork // keys are checked when stored, so this does not happen
		return a
	}
	h := req.Header
	// An empty Idempotency-Key marks the POST as safe to replay without
	// sending the header: net/http may then resend it on a fresh connection
	// when a pooled one turns out to be closed by the receiver. Receivers
	// de-duplicate on the webhook id, so a replay is harmless.
	h["Idempotency-Key"] = nil

	resp, err := s.client.Do(req)
	if err != nil {
		a.Error = classify(ctx, err)
		return a
	}
	defer resp.Body.Close()
	a.StatusCode = resp.StatusCode
	if a.StatusCode == http.StatusTooManyRequests || a.StatusCode == http.StatusServiceUnavailable {
		a.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), now)
	}
	// At most MaxResponseBytes, then stop: never wait for the rest of a
	// large or endless body. Closing an unfinished body drops the
	// connection, which is fine for such receivers.
	answer, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes))
	a.Response = cleanText(answer, MaxResponseBytes)
	if err != nil {
		a.Error = classify(ctx, err)
	}
	return a
}

// MaxRetryAfter is the longest Retry-After honoured; a longer one is
// ignored (the schedule applies), as a negative or unreadable one is.
const MaxRetryAfter = 24 * time.Hour

// retryAfter reads a Retry-After value, seconds or an HTTP date, as the
// wait from now it asks for; 0 when there is none to honour.
func retryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	var d time.Duration
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 || secs > int64(MaxRetryAfter/time.Second) {
			return 0
		}
		d = time.Duration(secs) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	}
	if d <= 0 || d > MaxRetryAfter {
		return 0
	}
	return d
}

// cleanText makes b valid UTF-8 of at most limit bytes: a rune cut at the end
// of a truncated body is dropped, other invalid bytes become U+FFFD.
func cleanText(b []byte, limit int) string {
	if len(b) == limit {
		// Drop a trailing incomplete rune (the read stopped inside it).
		for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
			if utf8.RuneStart(b[i]) {
				if !utf8.FullRune(b[i:]) {
					b = b[:i]
				}
				break
			}
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if len(s) > limit {
		// Replacements grew it: cut at a rune boundary.
		i := limit
		for i > 0 && !utf8.RuneStart(s[i]) {
			i--
		}
		s = s[:i]
	}
	return s
}

// classify names why an attempt got no (complete) answer. ctx is the
// attempt's own context, whose deadline is the attempt's timeout.
func classify(ctx context.Context, err error) string {
	var (
		dnsErr  *net.DNSError
		tlsErr  *tlsError
		recErr  tls.RecordHeaderError
		certErr *tls.CertificateVerificationError
		alert   tls.AlertError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	switch {
	case errors.Is(err, ssrf.ErrBlocked):
		return tally.AttemptBlocked
	case errors.Is(ctx.Err(), context.DeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return tally.AttemptTimeout
	case errors.As(err, &dnsErr):
		return tally.AttemptDNS
	case isTimeout(err):
		return tally.AttemptTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return tally.AttemptConnectionRefused
	case errors.As(err, &tlsErr), errors.As(err, &recErr), errors.As(err, &certErr), errors.As(err, &alert),
		errors.As(err, &unknown), errors.As(err, &host), errors.As(err, &invalid):
		return tally.AttemptTLS
	default:
		return tally.AttemptNetwork
	}
}

// isTimeout reports whether any error in err's chain says it is a timeout
// (errors.As would stop at *url.Error, whose Timeout looks one level down
// only).
func isTimeout(err error) bool {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return true
	}
	for ; err != nil; err = errors.Unwrap(err) {
		if t, ok := err.(interface{ Timeout() bool }); ok && t.Timeout() {
			return true
		}
	}
	return false
}
