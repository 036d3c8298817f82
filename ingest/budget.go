package ingest

import (
	"sync"

	"github.com/driftguard/driftguard/internal/config"
)

// budget caps the bytes of request bodies the edge holds: a body's bytes
// are taken before it is read and given back when the edge is done with
// them, which for an accepted body is when the producer is done with its
// record (acked, or failed for good), not when the request ends. A 503
// after the produce deadline thus keeps its bytes until the producer lets
// the record go, and a broker that stops acking makes the edge refuse new
// bodies instead of buffering them without end.
//
// Bodies over small bytes (and bodies of unknown length) may hold only
// largeLimit together, so that a flood of bodies at the limit leaves room
// for webhooks of ordinary size.
type budget struct {
	limit, largeLimit, small int64

	mu          sync.Mutex
	used        int64
	usedByLarge int64
}

func newBudget(limit int64) *budget {
	return &budget{limit: limit, largeLimit: config.LargeBodiesBudget(limit), small: config.SmallBodyBytes(limit)}
}

// hold is what one body took from the budget.
type hold struct {
	bytes int64
	large bool
}

// take reserves n bytes for a body of n bytes, or of unknown length when
// unknown; false when they do not fit, and nothing is taken then.
func (b *budget) take(n int64, unknown bool) (hold, bool) {
	h := hold{large: unknown || n > b.small}
	return h, b.grow(&h, n)
}

// grow adds n bytes to h, for a body of unknown length read further;
// false when they do not fit, and h is unchanged then.
func (b *budget) grow(h *hold, n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.limit || h.large && b.usedByLarge+n > b.largeLimit {
		return false
	}
	b.used += n
	if h.large {
		b.usedByLarge += n
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
}

// inUse is how many bytes are held.
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}
