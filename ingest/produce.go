package ingest

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ackWaiter receives one record's ack, and gives back what its body held
// of the edge's budget when the producer is done with the record, which
// may be after the request's wait ended at the deadline. Waiters are
// pooled: a channel and the promise bound to it cost two allocations a
// request otherwise. One whose wait ended at the deadline is not reused,
// since its promise may still run.
type ackWaiter struct {
	acked   chan error
	promise func(*kgo.Record, error)
	// Set for each record, read by its promise: the handler, what the
	// body holds of its budget and the backlog slot it was sent in.
	h    *Handler
	held hold
	slot int64
}

var ackWaiters = sync.Pool{New: func() any {
	w := &ackWaiter{acked: make(chan error, 1)}
	w.promise = func(_ *kgo.Record, err error) {
		w.h.backlog.done(w.slot, w.held.bytes)
		w.h.budget.give(w.held)
		w.acked <- err
	}
	return w
}}

// deadlines hands out produce contexts shared by every request that starts
// within one step, so a request pays for no timer and no cancellation of
// its own: one context with one timer serves them all. A request's
// deadline is thus between timeout−step and timeout after it started:
// never later than the configured deadline, at most a step earlier.
type deadlines struct {
	timeout, step time.Duration
	current       atomic.Pointer[deadline]
	mu            sync.Mutex
}

// deadline is a produce context for requests starting within a step of
// start.
type deadline struct {
	start time.Time
	ctx   context.Context
	// cancel is not called: the context ends at its deadline, and with a
	// background parent nothing else holds it.
	cancel context.CancelFunc
}

// deadlineSteps is how many steps a timeout is cut into.
const deadlineSteps = 50

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, step: max(timeout/deadlineSteps, time.Microsecond)}
}

// next returns the context a request starting now produces under, and now.
// The clock is read after the current deadline is loaded, so a request
// never shares a deadline that started after it.
func (d *deadlines) next() (context.Context, time.Time) {
	cur := d.current.Load()
	now := time.Now()
	if cur != nil && now.Sub(cur.start) < d.step {
		return cur.ctx, now
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cur = d.current.Load(); cur != nil && now.Sub(cur.start) < d.step && !now.Before(cur.start) {
		return cur.ctx, now
	}
	cur = &deadline{start: now}
	cur.ctx, cur.cancel = context.WithDeadline(context.Background(), now.Add(d.timeout))
	d.current.Store(cur)
	return cur.ctx, now
}

// produceAndWait writes the record and waits for the broker's ack or the
// deadline, whichever comes first; a nil error means the record, now with
// its partition and offset, is durable. The body's held bytes go with the
// record.
func (h *Handler) produceAndWait(rec *kgo.Record, held hold) error {
	ctx, start := h.deadlines.next()
	w := ackWaiters.Get().(*ackWaiter)
	w.h, w.held = h, held
	w.slot = h.backlog.sent(held.bytes)
	// Wait for the ack or the deadline: franz-go cannot fail a record
	// whose idempotent produce request is in flight, so waiting for the
	// promise alone could hang past the deadline when the broker vanishes.
	// An event answered 503 may still land; the publisher's retry is then
	// a duplicate, which the processors recognise. The request's own
	// context is not watched: a client that went away costs a wait no
	// longer than the deadline, and its event may land all the same.
	h.producer.Produce(ctx, rec, w.promise)
	var err error
	select {
	case err = <-w.acked:
		w.h, w.held = nil, hold{}
		ackWaiters.Put(w)
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.metrics.produceLatency.Observe(time.Since(start).Seconds())
	return err
}
