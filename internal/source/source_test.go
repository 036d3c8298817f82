package source

import (
	"net/http"
	"net/netip"
	"testing"
)

// A peer counts as itself unless it is a trusted proxy; then the
// right-most address of X-Forwarded-For that is not a trusted proxy does.
// IPv6 sources are counted per /64.
func TestClientAddrAndKey(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
	cases := []struct {
		name, peer string
		forwarded  []string
		want       string
	}{
		{"a peer that is no proxy", "203.0.113.7:5000", nil, "203.0.113.7"},
		{"a peer that is no proxy, whatever it forwards", "203.0.113.7:5000", []string{"198.51.100.1"}, "203.0.113.7"},
		{"a trusted proxy", "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"two trusted proxies", "10.1.2.3:5000", []string{"198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"a spoofed entry left of the client's", "10.1.2.3:5000", []string{"1.2.3.4, 198.51.100.1"}, "198.51.100.1"},
		{"entries over several headers", "10.1.2.3:5000", []string{"1.2.3.4", "198.51.100.1, 10.0.0.5"}, "198.51.100.1"},
		{"only trusted hops", "10.1.2.3:5000", []string{"10.0.0.5"}, "10.0.0.5"},
		{"a trusted proxy without the header", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"garbage after a trusted hop", "10.1.2.3:5000", []string{"junk, 10.0.0.5"}, "10.0.0.5"},
		{"an IPv4-mapped peer", "[::ffff:203.0.113.7]:5000", nil, "203.0.113.7"},
		{"an IPv6 peer, counted per /64", "[2001:db8:1:2:aaaa::1]:5000", nil, "2001:db8:1:2::"},
		{"an IPv6 client behind a trusted proxy", "[fd00::1]:5000", []string{"2001:db8:1:2:bbbb::9"}, "2001:db8:1:2::"},
	}
	for _, c := range cases {
		r := &http.Request{RemoteAddr: c.peer, Header: http.Header{}}
		for _, f := range c.forwarded {
			r.Header.Add("X-Forwarded-For", f)
		}
		if got := Key(ClientAddr(r, trusted)); got != netip.MustParseAddr(c.want) {
			t.Errorf("%s: source %s, want %s", c.name, got, c.want)
		}
	}
}
