// Package source tells where an HTTP request comes from, as the edge and
// the bridge count it for their per-source limits: the peer's address or,
// behind a trusted proxy, the client's address the proxy forwarded; and
// for IPv6 the /64 it is in, the smallest block a site is given, so that
// one host cannot pass for many by changing its interface id.
package source

import (
	"net/http"
	"net/netip"
	"strings"
)

// ClientAddr is the address r comes from: its peer, or, when the peer is
// a trusted proxy, the right-most X-Forwarded-For entry that is not one.
// Entries are read from the right because each proxy appends the address
// that connected to it: those a trusted proxy appended are true, anything
// left of them is whatever the client sent. A peer that is not a trusted
// proxy is the client, whatever its headers say.
func ClientAddr(r *http.Request, trusted []netip.Prefix) netip.Addr {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		// Not a TCP peer (a test's recorder): one source for all.
		return netip.Addr{}
	}
	addr := peer.Addr().Unmap()
	if !Trusted(addr, trusted) {
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
			if !Trusted(addr, trusted) {
				return addr
			}
		}
	}
	return addr
}

// Trusted reports whether a is in one of the trusted prefixes.
func Trusted(a netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Key is the unit a source is counted in: an IPv4 address, or the
// /64 of an IPv6 one.
func Key(a netip.Addr) netip.Addr {
	if a.Is6() {
		p, _ := a.WithZone("").Prefix(64)
		return p.Addr()
	}
	return a
}
