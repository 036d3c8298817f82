package ingest

import (
	"net/netip"
	"sync"

	"github.com/driftguard/driftguard/internal/config"
)

// budget caps the bytes of request bodies the edge holds: a body's bytes
// are taken as its buffer grows to hold them, as they arrive, and given
// back when the edge is done with them, which for an accepted body is
// when the producer is done with its record (acked, or failed for good),
// not when the request ends. A 503 after the produce deadline thus keeps
// its bytes until the producer lets the record go, and a broker that
// stops acking makes the edge refuse new bodies instead of buffering them
// without end.
//
// Bodies over small bytes (and bodies of unknown length) may hold only
// largeLimit together, so that a flood of bodies at the limit leaves room
// for webhooks of ordinary size; and the bodies of one source may hold
// only perSource together, so that one address cannot hold the budget.
type budget struct {
	limit, largeLimit, small, perSource int64

	mu          sync.Mutex
	used        int64
	usedByLarge int64
	bySource    map[netip.Addr]int64
}

// newBudget is a budget of limit bytes, of which one source may hold
// perSource (0: all of it).
func newBudget(limit, perSource int64) *budget {
	if perSource <= 0 || perSource > limit {
		perSource = limit
	}
	return &budget{limit: limit, largeLimit: config.LargeBodiesBudget(limit), small: config.SmallBodyBytes(limit),
		perSource: perSource, bySource: map[netip.Addr]int64{}}
}

// hold is what one body took from the budget.
type hold struct {
	bytes int64
	large bool
	// src is the source the bytes are counted to (sourceKey).
	src netip.Addr
}

// take reserves n bytes for the first of a body of declared bytes (or of
// unknown length when unknown) from src; false when they do not fit, and
// nothing is taken then.
func (b *budget) take(n, declared int64, unknown bool, src netip.Addr) (hold, bool) {
	h := hold{large: unknown || declared > b.small, src: src}
	return h, b.grow(&h, n)
}

// grow adds n bytes to h, for a body read further; false when they do
// not fit, and h is unchanged then.
func (b *budget) grow(h *hold, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit || h.large && b.usedByLarge+n > b.largeLimit || b.bySource[h.src]+n > b.perSource {
		return false
	}
	b.used += n
	if h.large {
		b.usedByLarge += n
	}
	if n > 0 {
		b.bySource[h.src] += n
	}
	h.bytes += n
	return true
}

// give returns h's bytes.
func (b *budget) give(h hold) {
	if h.bytes == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.used -= h.bytes
	if h.large {
		b.usedByLarge -= h.bytes
	}
	if left := b.bySource[h.src] - h.bytes; left > 0 {
		b.bySource[h.src] = left
	} else {
		delete(b.bySource, h.src)
	}
}

// inUse is how many bytes are held.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// heldBy is how many bytes src's bodies hold.
func (b *budget) heldBy(src netip.Addr) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bySource[src]
}
