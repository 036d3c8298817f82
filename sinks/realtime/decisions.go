package realtime

import (
	"strings"
	"sync"
	"sync/atomic"

	"github.com/driftguard/driftguard/internal/record"
)

// decision is what a client's write is answered with: the processor's
// outcome of the event the bridge produced for it.
type decision struct {
	Outcome record.Result
	Reason  record.Reason
	// Version is a send's sequence (the original one for a retry), or
	// the sequence a receipt reached.
	Version   int64
	MessageID string
	// ReceivedAtMs is when the event decided was received; AcceptedAtMs,
	// on a retried send, when the send that took the sequence was.
	ReceivedAtMs, AcceptedAtMs int64
}

// acceptedAtMs is when the message a send decision names was accepted.
func (d decision) acceptedAtMs() int64 {
	if d.AcceptedAtMs != 0 {
		return d.AcceptedAtMs
	}
	return d.ReceivedAtMs
}

// decisions are the writes of an assign stream waiting for their
// decision, by the event id the bridge gave each. The stream's outcomes
// reader (readOutcomes), which reads every outcome for chat catch-up,
// wakes them: a waiter hears of whatever its event became, applied,
// duplicate, stale or rejected. Any bridge reads every outcome, so a
// decision reaches the bridge that produced the event, wherever the
// processor runs.
type decisions struct {
	mu      sync.Mutex
	waiting map[string]chan decision
	// n is len(waiting), read without the lock for each outcome read: most
	// outcomes are of events no client of this bridge waits for.
	n atomic.Int64
}

func newDecisions() *decisions { return &decisions{waiting: map[string]chan decision{}} }

// await registers a wait for event id's decision, before the event is
// produced (its outcome may come before the produce's ack). done ends the
// wait, whether or not the decision came.
func (d *decisions) await(eventID string) (decided <-chan decision, done func()) {
	ch := make(chan decision, 1)
	d.mu.Lock()
	d.waiting[eventID] = ch
	d.n.Store(int64(len(d.waiting)))
	d.mu.Unlock()
	return ch, func() {
		d.mu.Lock()
		delete(d.waiting, eventID)
		d.n.Store(int64(len(d.waiting)))
		d.mu.Unlock()
	}
}

// deliver hands outcome o, read from the outcomes topic, to the write
// waiting for it, if any. A repeated outcome (the reader read the topic
// again) finds its waiter gone, or one already told.
func (d *decisions) deliver(o *record.Outcome) {
	if d.n.Load() == 0 || o.EventID == "" {
		return
	}
	d.mu.Lock()
	ch := d.waiting[o.EventID]
	d.mu.Unlock()
	if ch == nil {
		return
	}
	select {
	case ch <- decision{Outcome: o.Outcome, Reason: o.Reason, Version: o.Version,
		MessageID: strings.Clone(o.MessageID), ReceivedAtMs: o.ReceivedAtMs, AcceptedAtMs: o.AcceptedAtMs}:
	default:
	}
}
