package cli

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// connLimit is a listener that keeps at most max connections open, so that
// a client opening connections it never uses cannot take every file
// descriptor and stop the server from accepting. When it is full, it closes
// the connection that has waited longest with no request in progress (idle
// between keep-alive requests, or not done sending its first request's
// headers) to make room: that costs a well-behaved client a reconnect at
// most, while a request being served is never cut. When every connection
// has a request in progress, it accepts nothing until one closes.
//
// Its ConnState method must be the http.Server's ConnState hook.
type connLimit struct {
	net.Listener
	max int

	mu     sync.Mutex
	freed  *sync.Cond // a connection closed, or the listener did
	closed bool
	conns  map[net.Conn]*connEntry
}

type connEntry struct {
	busy  bool      // a request is in progress
	since time.Time // when it last became quiet
}

func newConnLimit(ln net.Listener, max int) *connLimit {
	l := &connLimit{Listener: ln, max: max, conns: map[net.Conn]*connEntry{}}
	l.freed = sync.NewCond(&l.mu)
	return l
}

func (l *connLimit) Accept() (net.Conn, error) {
	l.mu.Lock()
	for !l.closed && len(l.conns) >= l.max {
		if c := l.quietest(); c != nil {
			delete(l.conns, c) // its descriptor is released by Close
			c.Close()
			continue
		}
		l.freed.Wait()
	}
	closed := l.closed
	l.mu.Unlock()
	if closed {
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.conns[c] = &connEntry{since: time.Now()}
	l.mu.Unlock()
	return c, nil
}

// quietest is the connection quiet for longest, or nil when all are busy.
func (l *connLimit) quietest() net.Conn {
	var best net.Conn
	var since time.Time
	for c, e := range l.conns {
		if !e.busy && (best == nil || e.since.Before(since)) {
			best, since = c, e.since
		}
	}
	return best
}

// ConnState follows each connection's state (http.Server.ConnState).
func (l *connLimit) ConnState(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.conns[c]
	if !ok {
		return // shed already
	}
	switch state {
	case http.StateActive:
		e.busy = true
	case http.StateIdle:
		e.busy, e.since = false, time.Now()
	case http.StateHijacked, http.StateClosed:
		delete(l.conns, c)
		l.freed.Signal()
	}
}

func (l *connLimit) Close() error {
	l.mu.Lock()
	l.closed = true
	l.freed.Broadcast()
	l.mu.Unlock()
	return l.Listener.Close()
}
