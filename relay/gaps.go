package relay

import (
	"encoding/json"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/record"
)

// gaps is what a loop remembers of the gaps the publisher accepted: per
// key, the from_sequence last delivered and when. The processor asks
// again for an open gap at every buffered event and every gap timeout;
// with this memory the relay sends a gap once and records the re-asks
// instead of POSTing them, until resendAfter has passed.
//
// It learns only from committed delivery records: those of its own
// batches once their transaction committed, those it reads on
// `<stream>.replay` (another relay's, before a rebalance, or its own
// read back), and those of the last resendAfter it reads back when
// partitions are assigned to it. So it never holds a delivery the log
// does not, and reading a record twice, or out of order, changes
// nothing. The assignment's read runs in the group's goroutine, beside
// the loop's: mu guards the memory.
type gaps struct {
	resendAfter time.Duration
	mu          sync.Mutex
	byKey       map[string]deliveredGap
	// sweptAt is when entries older than resendAfter were last dropped.
	sweptAt time.Time
}

// deliveredGap is the gap of a key the publisher last accepted.
type deliveredGap struct {
	from int64
	at   time.Time
}

func newGaps(resendAfter time.Duration) *gaps {
	return &gaps{resendAfter: resendAfter, byKey: map[string]deliveredGap{}}
}

// verdict is what becomes of a request for key's gap at from at now
// without a POST: record.ReplayDuplicate when the publisher accepted the
// same gap within resendAfter, record.ReplaySuperseded when it accepted a
// later one of the key within it, and "" (send it) otherwise. A key reset
// by an operator opens its gaps anew, possibly at a sequence already
// delivered: those wait for resendAfter, like any re-ask.
func (g *gaps) verdict(key string, from int64, now time.Time) string {
	g.mu.Lock()
	last, ok := g.byKey[key]
	g.mu.Unlock()
	if !ok || now.Sub(last.at) >= g.resendAfter {
		return ""
	}
	switch {
	case from == last.from:
		return record.ReplayDuplicate
	case from < last.from:
		return record.ReplaySuperseded
	}
	return ""
}

// observe learns from rec when it is a committed delivery record of a
// gap the publisher accepted; a key keeps its latest delivery.
func (g *gaps) observe(rec *kgo.Record) {
	if !IsDelivery(rec) {
		return
	}
	var d record.ReplayDelivery
	if json.Unmarshal(rec.Value, &d) != nil || d.Result != record.ReplayDelivered {
		return
	}
	at := time.UnixMilli(d.AtMs)
	g.mu.Lock()
	defer g.mu.Unlock()
	if last, ok := g.byKey[d.Key]; ok && last.at.After(at) {
		return
	}
	g.byKey[d.Key] = deliveredGap{from: d.FromSequence, at: at}
}

// sweep drops, at most once per resendAfter, the gaps delivered longer
// than resendAfter ago, which no longer hold a request back: the memory
// stays bounded by the keys delivered within resendAfter.
func (g *gaps) sweep(now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.Sub(g.sweptAt) < g.resendAfter {
		return
	}
	g.sweptAt = now
	for key, last := range g.byKey {
		if now.Sub(last.at) >= g.resendAfter {
			delete(g.byKey, key)
		}
	}
}
