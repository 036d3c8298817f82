// Package connlimit caps the connections a listener holds open, in all and
// per source, so that connections cannot be hoarded: at the cap, the one
// idle the longest is closed for a new one. The edge's webhook listener
// and the bridge's public one hold their connections under it.
package connlimit

import (
	"container/list"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/driftguard/driftguard/internal/source"
)

// Limit caps the connections a listener has open (the edge's
// http.max_connections, the bridge's bridge.max_tcp_connections), and
// those of one peer (…_per_source), so that connections cannot be
// hoarded: a peer's connection over its cap is closed as soon as it is
// accepted; at the cap in all, a connection waiting for a request (as the
// server's ConnState tells) is closed for the new one; and only when every
// connection is busy with a request, each bounded by its read and write
// deadlines, does Accept wait for one to close.
//
// The connection closed is the one idle the longest among those that have
// not yet been served a request, and only when there are none, among
// those that have. Every refusal closes its connection, so a connection
// that is idle after a request had it accepted: its client holds the
// secret. An attacker without it can thus hold only connections that go
// first, and a publisher's keep-alive connection is not closed under it
// for one of theirs (which, were it reused at that moment, would fail the
// webhook sent on it).
//
// The cap is what bounds the edge's memory under a flood of connections:
// every refusal closes its connection, and net/http keeps a closed
// connection's goroutine, stack and structures for half a second after
// closing its write side, so that the client reads the answer before a
// reset. A flood that reconnects as fast as it is refused thus holds
// thousands of such connections at once without a cap. The cap counts
// them until they are closed for good, so they are part of it.
type Limit struct {
	max, perSource int
	// trusted proxies are not capped per source: their connections carry
	// many clients' requests.
	trusted []netip.Prefix

	mu       sync.Mutex
	freed    *sync.Cond
	open     int
	bySource map[netip.Addr]int
	// fresh holds the *conn waiting for their first request,
	// served those waiting for their next, each the one idle the longest
	// first.
	fresh, served list.List
	closed        bool

	// RefusedBySource and ClosedIdle count the connections closed by the
	// per-source cap and for a new one at the cap.
	RefusedBySource, ClosedIdle atomic.Int64
}

// New caps a listener at maxOpen connections, perSource of one source;
// the trusted proxies' are not capped per source.
func New(maxOpen, perSource int, trusted []netip.Prefix) *Limit {
	l := &Limit{max: maxOpen, perSource: min(max(perSource, 1), maxOpen), trusted: trusted, bySource: map[netip.Addr]int{}}
	l.freed = sync.NewCond(&l.mu)
	return l
}

// Listen is ln holding the caps. Serve it with ConnState as the
// http.Server's ConnState, which tells the limit the connections that
// are idle.
func (l *Limit) Listen(ln net.Listener) *Listener {
	return &Listener{Listener: ln, limit: l}
}

// Open is how many accepted connections are not yet closed.
func (l *Limit) Open() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.open)
}

// Idle is how many of them wait for a request.
func (l *Limit) Idle() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(l.fresh.Len() + l.served.Len())
}

// oldestIdle is the connection to close for a new one, nil when every
// connection is busy; l.mu is held.
func (l *Limit) oldestIdle() *conn {
	for _, q := range []*list.List{&l.fresh, &l.served} {
		if e := q.Front(); e != nil {
			return e.Value.(*conn)
		}
	}
	return nil
}

// sourceOf is the source a peer's connections count to, and false for a
// trusted proxy, whose are not counted.
func (l *Limit) sourceOf(peer net.Addr) (netip.Addr, bool) {
	ap, err := netip.ParseAddrPort(peer.String())
	if err != nil {
		// Not a TCP peer: one source for all.
		return netip.Addr{}, true
	}
	a := ap.Addr().Unmap()
	if source.Trusted(a, l.trusted) {
		return a, false
	}
	return source.Key(a), true
}

// admit counts c in as src's, closing the connection idle the longest when
// at the cap, or waiting for one to be idle or closed when none is; nil
// when src is at its cap, or the listener closed, and c is to be closed.
func (l *Limit) admit(c net.Conn, src netip.Addr, capped bool) *conn {
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.closed {
			return nil
		}
		if capped && l.bySource[src] >= l.perSource {
			l.RefusedBySource.Add(1)
			return nil
		}
		if l.open < l.max {
			break
		}
		if victim := l.oldestIdle(); victim != nil {
			l.release(victim)
			l.ClosedIdle.Add(1)
			// The raw connection: its server goroutine, reading it, sees
			// it closed and ends; conn.Close then finds it
			// released.
			_ = victim.Conn.Close()
			continue
		}
		l.freed.Wait()
	}
	tc := &conn{Conn: c, limit: l, src: src, capped: capped}
	l.open++
	if capped {
		l.bySource[src]++
	}
	// Idle until its first request is read.
	tc.wait(&l.fresh)
	return tc
}

// release uncounts c, once; l.mu is held.
func (l *Limit) release(c *conn) {
	if c.released {
		return
	}
	c.released = true
	c.busy()
	l.open--
	if c.capped {
		if l.bySource[c.src] <= 1 {
			delete(l.bySource, c.src)
		} else {
			l.bySource[c.src]--
		}
	}
	l.freed.Broadcast()
}

// ConnState follows a connection from idle (new, or between requests) to
// busy with a request and back: the server's ConnState. A connection not
// of this limit's listener is ignored.
func (l *Limit) ConnState(c net.Conn, state http.ConnState) {
	tc := trackedOf(c)
	if tc == nil || tc.limit != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if tc.released {
		return
	}
	switch state {
	case http.StateActive, http.StateHijacked:
		tc.busy()
	case http.StateIdle:
		if tc.queue == nil {
			tc.wait(&l.served)
			l.freed.Broadcast()
		}
	}
}

// trackedOf finds the *conn in c, through the wrappers of
// listeners that wrap this one's (those with NetConn, as tls.Conn).
func trackedOf(c net.Conn) *conn {
	for {
		switch v := c.(type) {
		case *conn:
			return v
		case interface{ NetConn() net.Conn }:
			c = v.NetConn()
		default:
			return nil
		}
	}
}

type Listener struct {
	net.Listener
	limit *Limit
}

// Accept accepts a connection within the caps: one over its peer's cap is
// closed and the next accepted.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, capped := l.limit.sourceOf(c.RemoteAddr())
		if tc := l.limit.admit(c, src, capped); tc != nil {
			return tc, nil
		}
		_ = c.Close()
		l.limit.mu.Lock()
		closed := l.limit.closed
		l.limit.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
	}
}

// Close closes the listener and ends an Accept waiting for a slot.
func (l *Listener) Close() error {
	l.limit.mu.Lock()
	l.limit.closed = true
	l.limit.freed.Broadcast()
	l.limit.mu.Unlock()
	return l.Listener.Close()
}

// conn is a connection counted by its limit until first closed.
type conn struct {
	net.Conn
	limit  *Limit
	src    netip.Addr
	capped bool
	// Guarded by limit.mu: while the connection waits for a request, it
	// is at place in queue (limit.fresh or limit.served); released once
	// it is uncounted.
	queue    *list.List
	place    *list.Element
	released bool
}

// wait queues c as waiting for a request in q; limit.mu is held.
func (c *conn) wait(q *list.List) {
	c.queue, c.place = q, q.PushBack(c)
}

// busy takes c out of its queue, if in one; limit.mu is held.
func (c *conn) busy() {
	if c.queue != nil {
		c.queue.Remove(c.place)
		c.queue, c.place = nil, nil
	}
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.limit.mu.Lock()
	c.limit.release(c)
	c.limit.mu.Unlock()
	return err
}

// CloseWrite half-closes a TCP connection, as net/http does before it
// closes one whose request body it did not read.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// Max is the cap on open connections.
func (l *Limit) Max() int { return l.max }

// Collectors are the limit's metrics, named for component (ingest,
// bridge) and its setting of the cap (http.max_connections): the open
// and idle connections, the cap, and the connections closed to hold it
// by reason.
func (l *Limit) Collectors(component, setting string) []prometheus.Collector {
	gauge := func(name, help string, read func() int64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "driftguard_" + component + "_" + name, Help: help},
			func() float64 { return float64(read()) })
	}
	shed := func(reason string, n *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "driftguard_" + component + "_connections_shed_total",
			Help: fmt.Sprintf("Connections closed to hold the caps, by reason: source_limit (over %s_per_source, closed once accepted), idle_at_limit (idle the longest at %s, closed for a new one).",
				setting, setting),
			ConstLabels: prometheus.Labels{"reason": reason}}, func() float64 { return float64(n.Load()) })
	}
	return []prometheus.Collector{
		gauge("connections", "Open connections of the public listener, those closing included.", l.Open),
		gauge("idle_connections", fmt.Sprintf("Open connections of the public listener waiting for a request: at %s, the one idle the longest is closed for a new one.", setting), l.Idle),
		gauge("connections_limit", setting+": at it, the connection idle the longest is closed for a new one, or new ones wait in the accept queue when none is idle.",
			func() int64 { return int64(l.Max()) }),
		shed("source_limit", &l.RefusedBySource),
		shed("idle_at_limit", &l.ClosedIdle),
	}
}
