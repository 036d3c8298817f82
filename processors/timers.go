package processors

import (
	"context"
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
	defer h.countedNow()
	value, _ := ctx.Value().(*tableValue)
	now, _ := meta.(int64)
	if value == nil {
		return
	}
	defer h.visited.add(value, now)
	if !value.Due(now) {
		return
	}
	// The deadline names the timer's decisions; Expire moves it.
	origin := timerOrigin(value.DeadlineMs)
	h.store(ctx, value, h.rules.Expire(&value.Entity, now), h.opts.Now().UnixMilli(), origin)
}

// timerTick is one tick of the timers: it advances the input
// watermark (a tick whose watermark cannot advance is skipped), runs visit
// over every key at the watermark and, once the visit is complete, the
// gauges of what it saw.
func (h *handler) timerTick(ctx context.Context, w *watermark, visit func(safeMs int64) error) error {
	safe, err := w.advance(ctx, h.opts.Now())
	if err != nil {
		h.opts.Logger.Debug("input watermark not advanced; timers wait", "err", err)
		return nil
	}
	m := h.opts.Metrics
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
// (in the visit's transaction).
type visitCounts struct {
	quarantined, gaps, buffered atomic.Int64
	// oldestGapMs is how long the oldest gap seen has been open at the
	// visit's time: a gap reported again and again shows here as one
	// number that only grows, where the gap count cannot tell a gap that
	// never fills from many that fill in time.
	oldestGapMs atomic.Int64
}

// add counts v's gap and quarantine as of nowMs, the visit's time.
func (c *visitCounts) add(v *tableValue, nowMs int64) {
	c.quarantined.Add(int64(len(v.Quarantine)))
	if len(v.Buffer) > 0 {
		c.gaps.Add(1)
		c.buffered.Add(int64(len(v.Buffer)))
		if v.GapSinceMs > 0 {
			open := max(nowMs-v.GapSinceMs, 0)
			// Partitions are visited in parallel, each in its own loop.
			for old := c.oldestGapMs.Load(); open > old; old = c.oldestGapMs.Load() {
				if c.oldestGapMs.CompareAndSwap(old, open) {
					break
				}
			}
		}
	}
}

func (c *visitCounts) reset() {
	c.quarantined.Store(0)
	c.gaps.Store(0)
	c.buffered.Store(0)
	c.oldestGapMs.Store(0)
}

// export sets the gauges of a complete visit.
func (c *visitCounts) export(m *Metrics, stream string) {
	m.quarantined.WithLabelValues(stream).Set(float64(c.quarantined.Load()))
	m.gaps.WithLabelValues(stream).Set(float64(c.gaps.Load()))
	m.buffered.WithLabelValues(stream).Set(float64(c.buffered.Load()))
	m.oldestGap.WithLabelValues(stream).Set(float64(c.oldestGapMs.Load()) / 1000)
}

// watermark tracks the input watermark of one group's input topic.
type watermark struct {
	adm          *kadm.Client
	topic, group string
	// samples are end offsets taken at increasing times, oldest first, not
	// yet known to be consumed.
	samples []endSample
	safe    time.Time
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
	ends, read, err := inputOffsets(ctx, w.adm, w.topic, w.group)
	if err != nil {
		return w.safe, err
	}
	w.samples = append(w.samples, endSample{at: now, ends: ends})
	for len(w.samples) > 0 && consumed(w.samples[0], read) {
		w.safe = w.samples[0].at
		w.samples = w.samples[1:]
	}
	w.forgetBefore(now.Add(-sampleWindow))
	return w.safe, nil
}

// inputOffsets reads the end offset of each partition of the input topic
// and the group's committed offset of each (absent where it has none).
func inputOffsets(ctx context.Context, adm *kadm.Client, topic, group string) (ends, committed map[int32]int64, err error) {
	listed, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, nil, err
	}
	if err := listed.Error(); err != nil {
		return nil, nil, err
	}
	ends = map[int32]int64{}
	listed.Each(func(o kadm.ListedOffset) { ends[o.Partition] = o.Offset })
	fetched, err := adm.FetchOffsetsForTopics(ctx, group, topic)
	if err != nil {
		return nil, nil, err
	}
	committed = map[int32]int64{}
	fetched.Each(func(o kadm.OffsetResponse) {
		if o.Err == nil && o.Topic == topic && o.At > 0 {
			committed[o.Partition] = o.At
		}
	})
	return ends, committed, nil
}

// inputLag is how many records of the input the group has not committed:
// a partition without a commit counts from offset 0.
func inputLag(ends, committed map[int32]int64) int64 {
	var lag int64
	for partition, end := range ends {
		lag += max(0, end-committed[partition])
	}
	return lag
}

// watchLag sets the stream's consumer-lag gauge every period from the
// broker's end offsets and the group's commits, until ctx ends. It runs
// beside the loop that decides, never inside it: a processor that stalls
// (a broker that does not answer its transactions, a decision that hangs)
// shows its lag rising, not the lag of the moment it stopped. A read that
// fails leaves the gauge as it was, and is tried again next period.
func (h *handler) watchLag(ctx context.Context, adm *kadm.Client, period time.Duration) {
	m := h.opts.Metrics
	if m == nil {
		return
	}
	gauge := m.lag.WithLabelValues(h.stream.Name)
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		ends, committed, err := inputOffsets(ctx, adm, h.names.In, h.group)
		if err == nil {
			gauge.Set(float64(inputLag(ends, committed)))
		} else if ctx.Err() == nil {
			h.opts.Logger.Debug("consumer lag not read; tried again", "stream", h.stream.Name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
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
