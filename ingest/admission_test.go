package ingest

import (
	"net/netip"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// The budget against a model: any interleaving of takes, growths and gives
// from a few sources never holds more than the limit, nor more than the
// large share in bodies over the small size, nor more than a source's
// share of one source's; a take or growth is refused exactly when it would
// break one of the three; and when every hold is given back, nothing is
// held.
func TestBudgetHoldsNoMoreThanItsLimit(t *testing.T) {
	sources := []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2"), netip.MustParseAddr("2001:db8::")}
	rapid.Check(t, func(t *rapid.T) {
		limit := rapid.Int64Range(256, 1<<20).Draw(t, "limit")
		perSource := rapid.Int64Range(1, limit).Draw(t, "per source")
		b := newBudget(limit, perSource)
		var holds []hold
		var used, usedByLarge int64
		bySource := map[netip.Addr]int64{}
		fits := func(n int64, large bool, src netip.Addr) bool {
			return used+n <= limit && (!large || usedByLarge+n <= b.largeLimit) && bySource[src]+n <= perSource
		}
		add := func(n int64, large bool, src netip.Addr) {
			used += n
			bySource[src] += n
			if large {
				usedByLarge += n
			}
		}
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 2).Draw(t, "op"); {
			case op == 0 || len(holds) == 0:
				declared := rapid.Int64Range(0, limit).Draw(t, "declared")
				n := min(declared, firstChunk)
				unknown := rapid.Bool().Draw(t, "unknown length")
				src := rapid.SampledFrom(sources).Draw(t, "source")
				large := unknown || declared > b.small
				want := fits(n, large, src)
				h, ok := b.take(n, declared, unknown, src)
				if ok != want {
					t.Fatalf("take(%d of %d, large=%v) from %s with %d held (%d large, %d of the source's) of %d (%d large, %d a source): %v, want %v",
						n, declared, large, src, used, usedByLarge, bySource[src], limit, b.largeLimit, perSource, ok, want)
				}
				if ok {
					holds = append(holds, h)
					add(n, large, src)
				}
			case op == 1:
				i := rapid.IntRange(0, len(holds)-1).Draw(t, "grown")
				n := rapid.Int64Range(0, limit/4).Draw(t, "grow")
				h := &holds[i]
				want := fits(n, h.large, h.src)
				before := h.bytes
				if ok := b.grow(h, n); ok != want {
					t.Fatalf("grow(%d) with %d held, %d of the source's: %v, want %v", n, used, bySource[h.src], ok, want)
				} else if ok {
					add(n, h.large, h.src)
				} else if h.bytes != before {
					t.Fatalf("a refused growth changed the hold from %d to %d", before, h.bytes)
				}
			default:
				i := rapid.IntRange(0, len(holds)-1).Draw(t, "given")
				h := holds[i]
				holds = append(holds[:i], holds[i+1:]...)
				b.give(h)
				add(-h.bytes, h.large, h.src)
			}
			if b.inUse() != used || used > limit || usedByLarge > b.largeLimit {
				t.Fatalf("holds %d (model %d, %d large) of %d (%d large)", b.inUse(), used, usedByLarge, limit, b.largeLimit)
			}
			for _, src := range sources {
				if got := b.heldBy(src); got != bySource[src] || got > perSource {
					t.Fatalf("%s holds %d (model %d) of its share of %d", src, got, bySource[src], perSource)
				}
			}
		}
		for _, h := range holds {
			b.give(h)
		}
		if got := b.inUse(); got != 0 || len(b.bySource) != 0 {
			t.Fatalf("%d bytes held after every hold was given back, by %d sources", got, len(b.bySource))
		}
	})
}

// Bodies at the limit cannot take the share kept for small ones: with the
// large share full, a small body is still taken, a large one is not.
func TestBudgetKeepsRoomForSmallBodies(t *testing.T) {
	b := newBudget(16<<20, 0)
	var large []hold
	for n := 0; ; n++ {
		// From many sources: the large share is what is measured.
		h, ok := b.take(256<<10, 256<<10, false, netip.AddrFrom4([4]byte{192, 0, 2, byte(n)}))
		if !ok {
			break
		}
		large = append(large, h)
	}
	if got, want := int64(len(large))*256<<10, b.largeLimit; got != want {
		t.Fatalf("bodies at 256 KiB took %d bytes, want the large share, %d", got, want)
	}
	if _, ok := b.take(firstChunk, 0, true, netip.Addr{}); ok {
		t.Errorf("a body of unknown length was taken beyond the large share")
	}
	if _, ok := b.take(2<<10, 2<<10, false, netip.Addr{}); !ok {
		t.Errorf("a 2 KiB body was refused with %d of %d bytes held", b.inUse(), b.limit)
	}
}

// One source cannot hold more than its share: with it full, the source's
// next body is refused and another source's taken; a body given back
// makes room for the source again.
func TestBudgetShareOfOneSource(t *testing.T) {
	b := newBudget(16<<20, 4<<20)
	attacker, publisher := netip.MustParseAddr("192.0.2.66"), netip.MustParseAddr("198.51.100.1")
	var held []hold
	for {
		h, ok := b.take(firstChunk, 64<<10, false, attacker)
		if !ok {
			break
		}
		held = append(held, h)
	}
	if got := b.heldBy(attacker); got != 4<<20 {
		t.Fatalf("one source holds %d bytes, want its share, %d", got, 4<<20)
	}
	if _, ok := b.take(firstChunk, 2<<10, false, publisher); !ok {
		t.Errorf("another source was refused while one held its share (%d of %d held)", b.inUse(), b.limit)
	}
	b.give(held[0])
	if _, ok := b.take(firstChunk, 64<<10, false, attacker); !ok {
		t.Errorf("a body given back made no room for its source")
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

// A source has at most max requests in flight; another source is not
// held back by it, and a request that leaves makes room.
func TestSourceLimit(t *testing.T) {
	l := newSourceLimit(2)
	a, b := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("198.51.100.1")
	ok1, ok2, ok3, other := l.enter(a), l.enter(a), l.enter(a), l.enter(b)
	if !ok1 || !ok2 || ok3 || !other {
		t.Fatalf("entered %v %v %v from one source, %v from another; want true true false, true", ok1, ok2, ok3, other)
	}
	l.leave(a)
	if !l.enter(a) {
		t.Errorf("a request that left made no room for the next")
	}
	if newSourceLimit(0) != nil {
		t.Errorf("a limit of 0 is not off")
	}
}
