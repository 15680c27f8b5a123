package cli

import (
	"context"
	"io"
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit is a listener that keeps at most max connections open, so that
// a client opening connections it never uses cannot take every file
// descriptor and stop the server from accepting. When it is full and a new
// connection comes in, it closes the connection that has waited longest
// with no request being served to make room: idle between keep-alive
// requests, not done sending its request's headers, or still sending its
// request's body (Track). That costs a well-behaved client a reconnect at
// most, and a client that holds connections by sending slowly holds them
// no better than one that sends nothing; a request whose body has arrived
// is never cut. When every connection has a request being served, a new
// connection waits until one closes or becomes quiet.
//
// Its ConnState and ConnContext methods must be the http.Server's hooks of
// those names, and Track must wrap its handler.
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	freed  *sync.Cond // a connection closed or became quiet, or the listener closed
	closed bool
	conns  map[net.Conn]*connEntry
}

type connEntry struct {
	serving bool      // a request is in progress and its body has arrived
	since   time.Time // when it last became quiet
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	l := &connLimit{Listener: ln, max: max, conns: map[net.Conn]*connEntry{}}
	l.freed = sync.NewCond(&l.mu)
	return l
}

// Accept makes room once a new connection is there, not ahead of it: room
// made ahead would go to the next connection of whoever holds the others.
// When nothing can be shed, the new connection waits, accepted but not yet
// served, until a connection closes or becomes quiet.
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.closed && len(l.conns) >= l.max {
		if q := l.quietest(); q != nil {
			delete(l.conns, q) // its descriptor is released by Close
			q.Close()
			continue
		}
		l.freed.Wait()
	}
	if l.closed {
		c.Close()
		return nil, net.ErrClosed
	}
	l.conns[c] = &connEntry{since: time.Now()}
	return c, nil
}

// quietest is the connection quiet for longest, or nil when all are busy.
func (l *connLimit) quietest() net.Conn {
	var best net.Conn
	var since time.Time
	for c, e := range l.conns {
		if !e.serving && (best == nil || e.since.Before(since)) {
			best, since = c, e.since
		}
	}
	return best
}

// ConnState follows each connection's state (http.Server.ConnState).
func (l *connLimit) ConnState(c net.Conn, state http.ConnState) {
	switch state {
	case http.StateActive:
		l.setServing(c, true)
	case http.StateIdle:
		l.setServing(c, false)
	case http.StateHijacked, http.StateClosed:
		l.mu.Lock()
		defer l.mu.Unlock()
		if _, ok := l.conns[c]; ok {
			delete(l.conns, c)
			l.freed.Signal()
		}
	}
}

func (l *connLimit) setServing(c net.Conn, serving bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	if !ok {
		return // shed already
	}
	if e.serving = serving; !serving {
		e.since = time.Now()
		l.freed.Signal()
	}
}

type connKey struct{}

// ConnContext puts a request's connection in its context, for Track
// (http.Server.ConnContext).
func (l *connLimit) ConnContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, connKey{}, c)
}

// Track counts a request's connection as quiet from the time its handler
// starts until the request's body has arrived.
func (l *connLimit) Track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c, ok := r.Context().Value(connKey{}).(net.Conn); ok && r.ContentLength != 0 {
			l.setServing(c, false)
			r.Body = &arriving{ReadCloser: r.Body, left: r.ContentLength, arrived: func() { l.setServing(c, true) }}
		}
		next.ServeHTTP(w, r)
	})
}

// arriving is a request body that calls arrived once it has been read
// whole (or its reading failed).
type arriving struct {
	io.ReadCloser
	left    int64 // bytes to come; -1 when unknown (chunked)
	arrived func()
}

func (b *arriving) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if b.arrived == nil {
		return n, err
	}
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err != nil || b.left == 0 {
		b.arrived()
		b.arrived = nil
	}
	return n, err
}
