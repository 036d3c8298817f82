package ingest

import (
	"net/http"
	"net/netip"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The budget against a model: any interleaving of takes, growths and gives
// never holds more than the limit, nor more than the large share in bodies
// over the small size; a take or growth is refused exactly when it would
// break one of the two; and when every hold is given back, nothing is held.
func TestBudgetHoldsNoMoreThanItsLimit(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(256, 1<<20).Draw(t, "limit")
		b := newBudget(limit)
		var holds []hold
		var used, usedByLarge int64
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
			case op == 0 || len(holds) == 0:
				n := rapid.Int64Range(0, limit).Draw(t, "take")
				unknown := rapid.Bool().Draw(t, "unknown length")
				large := unknown || n > b.small
				fits := used+n <= limit && (!large || usedByLarge+n <= b.largeLimit)
				h, ok := b.take(n, unknown)
				if ok != fits {
					t.Fatalf("take(%d, large=%v) with %d held (%d large) of %d (%d large): %v, want %v", n, large, used, usedByLarge, limit, b.largeLimit, ok, fits)
				}
				if ok {
					holds = append(holds, h)
					used += n
					if large {
						usedByLarge += n
					}
				}
			case op == 1:
				i := rapid.IntRange(0, len(holds)-1).Draw(t, "grown")
				n := rapid.Int64Range(0, limit/4).Draw(t, "grow")
				h := &holds[i]
				fits := used+n <= limit && (!h.large || usedByLarge+n <= b.largeLimit)
				before := h.bytes
				if ok := b.grow(h, n); ok != fits {
					t.Fatalf("grow(%d) with %d held: %v, want %v", n, used, ok, fits)
				} else if ok {
					used += n
					if h.large {
						usedByLarge += n
					}
				} else if h.bytes != before {
					t.Fatalf("a refused growth changed the hold from %d to %d", before, h.bytes)
				}
			default:
				i := rapid.IntRange(0, len(holds)-1).Draw(t, "given")
				h := holds[i]
				holds = append(holds[:i], holds[i+1:]...)
				b.give(h)
				used -= h.bytes
				if h.large {
					usedByLarge -= h.bytes
				}
			}
			if b.inUse() != used || used > limit || usedByLarge > b.largeLimit {
				t.Fatalf("holds %d (model %d, %d large) of %d (%d large)", b.inUse(), used, usedByLarge, limit, b.largeLimit)
			}
		}
		for _, h := range holds {
			b.give(h)
		}
		if got := b.inUse(); got != 0 {
			t.Fatalf("%d bytes held after every hold was given back", got)
		}
	})
}

// Bodies at the limit cannot take the share kept for small ones: with the
// large share full, a small body is still taken, a large one is not.
func TestBudgetKeepsRoomForSmallBodies(t *testing.T) {
	b := newBudget(16 << 20)
	var large []hold
	for {
		h, ok := b.take(256<<10, false)
		if !ok {
			break
		}
		large = append(large, h)
	}
	if got, want := int64(len(large))*256<<10, b.largeLimit; got != want {
		t.Fatalf("bodies at 256 KiB took %d bytes, want the large share, %d", got, want)
	}
	if _, ok := b.take(firstChunk, true); ok {
		t.Errorf("a body of unknown length was taken beyond the large share")
	}
	if _, ok := b.take(2<<10, false); !ok {
		t.Errorf("a 2 KiB body was refused with %d of %d bytes held", b.inUse(), b.limit)
	}
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// Retry-After is how long the oldest record the producer holds has
// waited: a second while acks come at once; the wait of the record at the
// head of a queue when acks are slow; growing with an outage, up to a
// minute, and still a minute for a record older than that; and back to a
// second once the broker has taken everything.
func TestRetryAfterIsTheWaitOfTheOldestRecord(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	b := newBacklog(clock.now)
	check := func(what string, want time.Duration) {
		t.Helper()
		// Records are counted per quarter second: a wait is known to that.
		if got := b.retryAfter(); got < want || got > want+backlogSlot {
			t.Errorf("%s: Retry-After %s, want %s", what, got, want)
		}
	}
	check("nothing pending", time.Second)

	// A healthy broker: every record acked within 20 ms.
	for range 100 {
		slot := b.sent(1000)
		clock.advance(20 * time.Millisecond)
		check("acks within 20ms", time.Second)
		b.done(slot, 1000)
	}

	// A slow broker: acks 3 s after the send, a record sent every 100 ms.
	var queue []int64
	for range 100 {
		queue = append(queue, b.sent(1000))
		clock.advance(100 * time.Millisecond)
		if len(queue) > 30 {
			b.done(queue[0], 1000)
			queue = queue[1:]
		}
	}
	check("acks 3s after the send", 3*time.Second)

	// The broker stops acking.
	clock.advance(10 * time.Second)
	check("no ack for 10s", 13*time.Second)
	clock.advance(40 * time.Second)
	check("no ack for 50s", 53*time.Second)
	clock.advance(5 * time.Minute)
	check("no ack for over 5m", time.Minute)
	if got := b.pendingBytes(); got != 30*1000 {
		t.Errorf("%d bytes pending, want %d", got, 30*1000)
	}

	// It resumes and takes everything, the records older than a minute too.
	for _, slot := range queue {
		b.done(slot, 1000)
	}
	check("nothing pending after the outage", time.Second)
	if got := b.pendingBytes(); got != 0 {
		t.Errorf("%d bytes pending after every ack", got)
	}
	slot := b.sent(1000)
	clock.advance(2 * time.Second)
	check("one record sent 2s ago", 2*time.Second)
	b.done(slot, 1000)
}

// A peer counts as itself unless it is a trusted proxy; then the
// right-most address of X-Forwarded-For that is not a trusted proxy does.
// IPv6 sources are counted per /64.
func TestSourceOfARequest(t *testing.T) {
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
		if got := sourceKey(clientAddr(r, trusted)); got != netip.MustParseAddr(c.want) {
			t.Errorf("%s: source %s, want %s", c.name, got, c.want)
		}
	}
}

// A source has at most max requests in flight; another source is not
// held back by it, and a request that leaves makes room.
func TestSourceLimit(t *testing.T) {
	l := newSourceLimit(2, nil)
	from := func(peer string) *http.Request { return &http.Request{RemoteAddr: peer, Header: http.Header{}} }
	a1, ok1 := l.enter(from("203.0.113.7:1"))
	_, ok2 := l.enter(from("203.0.113.7:2"))
	_, ok3 := l.enter(from("203.0.113.7:3"))
	_, other := l.enter(from("198.51.100.1:1"))
	if !ok1 || !ok2 || ok3 || !other {
		t.Fatalf("entered %v %v %v from one source, %v from another; want true true false, true", ok1, ok2, ok3, other)
	}
	l.leave(a1)
	if _, ok := l.enter(from("203.0.113.7:4")); !ok {
		t.Errorf("a request that left made no room for the next")
	}
	if newSourceLimit(0, nil) != nil {
		t.Errorf("a limit of 0 is not off")
	}
}
