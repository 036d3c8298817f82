package ingest

import (
	"net"
	"sync"
	"sync/atomic"
)

// connectionLimit caps the connections the edge has open
// (http.max_connections): at the cap, Accept waits for one to close, and
// new connections wait in the kernel's accept queue.
//
// The cap is what bounds the edge's memory under a flood of connections:
// every refusal that leaves a body unread (401 before the body, 503 over
// the in-flight budget) closes its connection, and net/http keeps a closed
// connection's goroutine, stack and structures for half a second after
// closing its write side, so that the client reads the answer before a
// reset. A flood that reconnects as fast as it is refused thus holds
// thousands of such connections at once without a cap. The cap counts
// them until they are closed for good, so they are part of it.
//
// golang.org/x/net/netutil.LimitListener does the same but neither says
// how many connections are open nor passes CloseWrite through (without
// which net/http cannot half-close, and the client may see a reset
// instead of the answer).
type connectionLimit struct {
	slots chan struct{}
	open  atomic.Int64
}

func newConnectionLimit(max int) *connectionLimit {
	return &connectionLimit{slots: make(chan struct{}, max)}
}

// listen is ln holding the cap.
func (l *connectionLimit) listen(ln net.Listener) *limitedListener {
	return &limitedListener{Listener: ln, limit: l, closed: make(chan struct{})}
}

// openConnections is how many accepted connections are not yet closed.
func (l *connectionLimit) openConnections() int64 { return l.open.Load() }

// max is the cap.
func (l *connectionLimit) max() int { return cap(l.slots) }

type limitedListener struct {
	net.Listener
	limit *connectionLimit

	closeOnce sync.Once
	closed    chan struct{}
}

// Accept waits for a free slot, then for a connection.
func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.limit.slots <- struct{}{}:
	case <-l.closed:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.limit.slots
		return nil, err
	}
	l.limit.open.Add(1)
	return &limitedConn{Conn: c, limit: l.limit}, nil
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *limitedListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// limitedConn gives its slot back when first closed.
type limitedConn struct {
	net.Conn
	limit    *connectionLimit
	released sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.released.Do(func() {
		c.limit.open.Add(-1)
		<-c.limit.slots
	})
	return err
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one whose request body it did not read.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
