package clickhouse

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A writer gathers records into batches and inserts each batch in the
// background while it gathers the next, so decoding and the INSERT use a
// core each. At most one batch is in flight: when the next is due before
// it lands, the writer waits (and so stops polling). A batch's offsets are
// committed, through commit, after it has landed and in batch order.
type writer struct {
	s        *Sink
	commit   func([]*kgo.Record)
	cur      *batch
	spare    *batch
	inflight *batch
	// done is closed when the batch in flight has landed, or failed with
	// err (only once ctx ended).
	done    chan struct{}
	err     error
	flushAt time.Time
}

func (s *Sink) newWriter(commit func([]*kgo.Record)) *writer {
	return &writer{s: s, commit: commit, cur: newBatch(), spare: newBatch()}
}

// add gathers records into the current batch.
func (w *writer) add(ctx context.Context, records []*kgo.Record) error {
	if len(records) == 0 {
		return nil
	}
	if w.cur.records == 0 {
		w.flushAt = time.Now().Add(w.s.cfg.ClickHouse.BatchPeriod)
	}
	return w.s.untilDone(ctx, "reading positions", func(bool) error { return w.s.add(ctx, w.cur, records) })
}

// due reports whether the current batch has reached a flush threshold.
func (w *writer) due() bool {
	ch := w.s.cfg.ClickHouse
	return w.cur.records > 0 && (w.cur.records >= ch.BatchRows || w.cur.bytes >= ch.BatchBytes || !time.Now().Before(w.flushAt))
}

func (w *writer) idle() bool { return w.inflight == nil && w.cur.records == 0 }

// flush hands the current batch to a background INSERT, once the batch
// before it has landed and been committed. Its rows are streamed to the
// server first, while the batch before is still being written; if that
// one fails, the prepared INSERT is dropped (see discard) and sent again
// after it.
func (w *writer) flush(ctx context.Context) error {
	sendCtx, stopSending := outlast(ctx, insertGrace)
	w.s.prepare(sendCtx, w.cur)
	if err := w.settle(true); err != nil {
		for _, blk := range w.cur.blocks() {
			blk.discard()
		}
		stopSending()
		return err
	}
	b := w.cur
	w.cur, w.spare, w.inflight = w.spare, nil, b
	w.done = make(chan struct{})
	go func() {
		defer stopSending()
		w.err = w.s.untilDone(ctx, "inserting", func(retry bool) error { return w.s.flush(sendCtx, b, retry) })
		close(w.done)
	}()
	return nil
}

// insertGrace is how long an INSERT under way when the sink stops may
// take to be answered. Cancelled, the driver gives up at once while the
// server goes on writing the table and then, through the views, the
// positions: the sink would stop before ClickHouse holds what it wrote,
// and a restart meanwhile would read positions behind the rows. No
// new attempt begins after the stop.
const insertGrace = 10 * time.Second

// outlast is a context that ends grace after ctx ends, or at stop.
func outlast(ctx context.Context, grace time.Duration) (_ context.Context, stop func()) {
	outlasting, cancel := context.WithCancel(context.WithoutCancel(ctx))
	unwatch := context.AfterFunc(ctx, func() { time.AfterFunc(grace, cancel) })
	return outlasting, func() { unwatch(); cancel() }
}

// settle commits the batch in flight if it has landed, or with wait once
// it has. It fails only when ctx ended before the batch landed.
func (w *writer) settle(wait bool) error {
	if w.inflight == nil {
		return nil
	}
	if wait {
		<-w.done
	} else {
		select {
		case <-w.done:
		default:
			return nil
		}
	}
	if w.err != nil {
		return w.err
	}
	w.commit(w.inflight.lastRecords())
	w.inflight.reset()
	w.spare, w.inflight = w.inflight, nil
	return nil
}

// wait returns once no INSERT runs in the background.
func (w *writer) wait() {
	if w.inflight != nil {
		<-w.done
	}
}
