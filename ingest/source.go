package ingest

import (
	"net/http"
	"net/netip"
	"strings"
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

// enter counts a request of src (sourceKey) in; false when the source
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

// clientAddr is the address r comes from: its peer, or, when the peer is
// a trusted proxy, the right-most X-Forwarded-For entry that is not one.
// Entries are read from the right because each proxy appends the address
// that connected to it: those a trusted proxy appended are true, anything
// left of them is whatever the client sent. A peer that is not a trusted
// proxy is the client, whatever its headers say.
func clientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// Not a TCP peer (a test's recorder): one source for all.
		return netip.Addr{}
	}
	addr := peer.Addr().Unmap()
	if !isTrusted(addr, trusted) {
		return addr
	}
	forwarded := r.Header.Values("X-Forwarded-For")
	for i := len(forwarded) - 1; i >= 0; i-- {
		entries := strings.Split(forwarded[i], ",")
		for j := len(entries) - 1; j >= 0; j-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(entries[j]))
			if err != nil {
				// A trusted proxy wrote nothing unreadable: the last
				// address it vouched for is as far as the header goes.
				return addr
			}
			addr = hop.Unmap()
			if !isTrusted(addr, trusted) {
				return addr
			}
		}
	}
	return addr
}

func isTrusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// sourceKey is the unit a source is counted in: an IPv4 address, or the
// /64 of an IPv6 one.
func sourceKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.Addr()
	}
	return a
}
