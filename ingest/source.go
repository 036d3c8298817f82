package ingest

import (
	"net/netip"
	"sync"
)

// sourceLimit caps the requests one source may have in flight
// (http.max_per_source). A source is the peer's address or, when the peer
// is a trusted proxy, the address X-Forwarded-For gives for the client;
// IPv6 sources are counted per /64, the smallest block a site is given, so
// that one host cannot pass for many by changing its interface id.
type sourceLimit struct {
	max int

	mu     sync.Mutex
	active map[netip.Addr]int
}

func newSourceLimit(max int) *sourceLimit {
	if max <= 0 {
		return nil
	}
	return &sourceLimit{max: max, active: map[netip.Addr]int{}}
}

// enter counts a request of src (source.Key) in; false when the source
// has max in flight already. A true enter is matched by leave(src).
func (l *sourceLimit) enter(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active[src] >= l.max {
		return false
	}
	l.active[src]++
	return true
}

func (l *sourceLimit) leave(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.active[src] <= 1 {
		delete(l.active, src)
		return
	}
	l.active[src]--
}
