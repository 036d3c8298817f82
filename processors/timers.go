package processors

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
)

// Timers. goka has no punctuator, so driftguard adds one: every entity
// records its earliest pending deadline (decide.Entity.DeadlineMs, in the table,
// so it survives restarts and moves with its partition on a rebalance),
// and RunTimers asks goka every tick to visit each key of the partitions
// this instance owns. goka runs visits in the partition's own loop,
// serialized with events, so a timer firing and an event for the same key
// never race. The visit is cheap for keys without a due deadline; its cost
// is one table read per key per tick, which processing.timer_tick trades
// against timer precision.
//
// A timer must not fire before the input that could have cancelled it is
// processed: after a restart or a rebalance the processor replays what
// arrived while it was away, and a parent waiting in that backlog must
// reconcile its child, not lose the race to a tick. So ticks carry the
// input watermark instead of the wall clock: the latest moment T at which
// the group's committed offsets have reached every partition's end offset
// as sampled at T. A caught-up processor's watermark trails the clock by
// about one tick plus goka's commit interval.

// tickVisitor is the goka visitor that fires due timers.
const tickVisitor = "timers"

// tick is the visitor callback; meta is the tick's time in unix ms.
func (h *handler) tick(ctx decisionContext, meta any) {
	value, _ := ctx.Value().(*tableValue)
	now, _ := meta.(int64)
	if value == nil {
		return
	}
	defer h.visited.add(value)
	if !value.Due(now) {
		return
	}
	// The deadline names the timer's decisions; Expire moves it.
	origin := timerOrigin(value.DeadlineMs)
	h.store(ctx, value, h.rules.Expire(&value.Entity, now), h.opts.Now().UnixMilli(), origin)
}

// RunTimers visits the processor's keys every tick until ctx ends. A visit
// cut short by a rebalance is simply retried at the next tick: deadlines
// live in the table, not here. A complete visit also counts the children
// waiting in lost+found, for the quarantine gauge. With adm nil (goka's
// tester) ticks carry the clock instead of the input watermark.
func (p *Processor) RunTimers(ctx context.Context, tick time.Duration, adm *kadm.Client) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	w := &watermark{adm: adm, topic: p.h.names.In, group: p.h.group, committed: &p.h.committed}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// Not cancelled with ctx: goka's VisitAll, interrupted, returns while
		// its partitions still count visits (a data race in goka). A visit
		// ends on its own when done or when the processor stops.
		err := p.h.timerTick(ctx, w, func(safeMs int64) error {
			return p.VisitAll(context.WithoutCancel(ctx), tickVisitor, safeMs)
		})
		if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			p.h.opts.Logger.Debug("timer visit incomplete; retried next tick", "err", err)
		}
	}
}

// timerTick is one tick of either runtime's timers: it advances the input
// watermark (a tick whose watermark cannot advance is skipped), exports
// the input lag, runs visit over every key at the watermark and, once the
// visit is complete, the gauges of what it saw.
func (h *handler) timerTick(ctx context.Context, w *watermark, visit func(safeMs int64) error) error {
	safe, err := w.advance(ctx, h.opts.Now())
	if err != nil {
		h.opts.Logger.Debug("input watermark not advanced; timers wait", "err", err)
		return nil
	}
	m := h.opts.Metrics
	if m != nil {
		m.lag.WithLabelValues(h.stream.Name).Set(float64(w.lag()))
	}
	h.visited.reset()
	if err := visit(safe.UnixMilli()); err != nil {
		return err
	}
	if m != nil {
		h.visited.export(m, h.stream.Name)
	}
	return nil
}

// visitCounts sum what one timer visit sees across the keys it visits
// (concurrently, one goroutine per partition).
type visitCounts struct {
	quarantined, gaps, buffered atomic.Int64
}

func (c *visitCounts) add(v *tableValue) {
	c.quarantined.Add(int64(len(v.Quarantine)))
	if len(v.Buffer) > 0 {
		c.gaps.Add(1)
		c.buffered.Add(int64(len(v.Buffer)))
	}
}

func (c *visitCounts) reset() {
	c.quarantined.Store(0)
	c.gaps.Store(0)
	c.buffered.Store(0)
}

// export sets the gauges of a complete visit.
func (c *visitCounts) export(m *Metrics, stream string) {
	m.quarantined.WithLabelValues(stream).Set(float64(c.quarantined.Load()))
	m.gaps.WithLabelValues(stream).Set(float64(c.gaps.Load()))
	m.buffered.WithLabelValues(stream).Set(float64(c.buffered.Load()))
}

// watermark tracks the input watermark of one group's input topic.
type watermark struct {
	adm          *kadm.Client
	topic, group string
	// samples are end offsets taken at increasing times, oldest first, not
	// yet known to be consumed.
	samples []endSample
	safe    time.Time
	// committed receives the committed offsets read, per partition.
	committed *atomic.Pointer[map[int32]int64]
}

type endSample struct {
	at   time.Time
	ends map[int32]int64
}

// advance samples the input's end offsets at now and returns the latest
// sample time whose offsets the group has committed.
func (w *watermark) advance(ctx context.Context, now time.Time) (time.Time, error) {
	if w.adm == nil {
		return now, nil
	}
	ends, err := w.adm.ListEndOffsets(ctx, w.topic)
	if err != nil {
		return w.safe, err
	}
	sample := endSample{at: now, ends: map[int32]int64{}}
	ends.Each(func(o kadm.ListedOffset) { sample.ends[o.Partition] = o.Offset })
	w.samples = append(w.samples, sample)
	committed, err := w.adm.FetchOffsetsForTopics(ctx, w.group, w.topic)
	if err != nil {
		return w.safe, err
	}
	read := map[int32]int64{}
	committed.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.Topic == w.topic && o.At > 0 {
			read[o.Partition] = o.At
		}
	})
	w.committed.Store(&read)
	for len(w.samples) > 0 && consumed(w.samples[0], read) {
		w.safe = w.samples[0].at
		w.samples = w.samples[1:]
	}
	w.forgetBefore(now.Add(-sampleWindow))
	return w.safe, nil
}

// lag is how many records of the input the group has not committed, as of
// the latest sample: a partition without a commit counts from offset 0.
func (w *watermark) lag() int64 {
	if len(w.samples) == 0 {
		return 0
	}
	committed := map[int32]int64{}
	if c := w.committed.Load(); c != nil {
		committed = *c
	}
	var lag int64
	for partition, end := range w.samples[len(w.samples)-1].ends {
		lag += max(0, end-committed[partition])
	}
	return lag
}

// sampleWindow bounds the end offsets a watermark keeps while its group
// falls behind: a stuck group keeps the samples of the last hour, whatever
// the tick.
const sampleWindow = time.Hour

// forgetBefore drops the samples taken before cutoff.
func (w *watermark) forgetBefore(cutoff time.Time) {
	i := 0
	for i < len(w.samples) && w.samples[i].at.Before(cutoff) {
		i++
	}
	w.samples = w.samples[i:]
}

// consumed reports whether the committed offsets (per partition, absent
// when none) reach every end offset of the sample; an empty partition needs
// no commit.
func consumed(s endSample, committed map[int32]int64) bool {
	for partition, end := range s.ends {
		if end != 0 && committed[partition] < end {
			return false
		}
	}
	return true
}
