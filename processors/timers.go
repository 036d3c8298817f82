package processors

import (
	"context"
	"errors"
	"time"

	"github.com/lovoo/goka"
)

// Timers. goka has no punctuator, so driftguard adds one: every entity
// records its earliest pending deadline (Entity.DeadlineMs, in the table,
// so it survives restarts and moves with its partition on a rebalance),
// and RunTimers asks goka every tick to visit each key of the partitions
// this instance owns. goka runs visits in the partition's own loop,
// serialized with events, so a timer firing and an event for the same key
// never race. The visit is cheap for keys without a due deadline; its cost
// is one table read per key per tick, which processing.timer_tick trades
// against timer precision.

// tickVisitor is the goka visitor that fires due timers.
const tickVisitor = "timers"

// timed is a policy with timers.
type timed interface {
	// expire fires what is due at nowMs and sets the next deadline.
	expire(e *Entity, nowMs int64) Effects
}

// tick is the visitor callback; meta is the tick's time in unix ms.
func (h *handler) tick(ctx goka.Context, meta any) {
	entity, _ := ctx.Value().(*Entity)
	now, _ := meta.(int64)
	if entity == nil {
		return
	}
	defer func() { h.visitedQuarantine.Add(int64(len(entity.Quarantine))) }()
	if entity.DeadlineMs == 0 || entity.DeadlineMs > now {
		return
	}
	t, ok := h.policy.(timed)
	if !ok {
		entity.DeadlineMs = 0
		ctx.SetValue(entity)
		return
	}
	effects := t.expire(entity, now)
	ctx.SetValue(entity)
	h.emitEffects(ctx, entity, effects)
}

// RunTimers visits the processor's keys every tick until ctx ends. A visit
// cut short by a rebalance is simply retried at the next tick: deadlines
// live in the table, not here. A complete visit also counts the children
// waiting in lost+found, for the quarantine gauge.
func (p *Processor) RunTimers(ctx context.Context, tick time.Duration) error {
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		p.h.visitedQuarantine.Store(0)
		// Not cancelled with ctx: goka's VisitAll, interrupted, returns while
		// its partitions still count visits (a data race in goka). A visit
		// ends on its own when done or when the processor stops.
		err := p.VisitAll(context.WithoutCancel(ctx), tickVisitor, p.h.opts.Now().UnixMilli())
		switch {
		case err == nil:
			if m := p.h.opts.Metrics; m != nil {
				m.quarantined.WithLabelValues(p.h.stream.Name).Set(float64(p.h.visitedQuarantine.Load()))
			}
		case !errors.Is(err, context.Canceled) && ctx.Err() == nil:
			p.h.opts.Logger.Debug("timer visit incomplete; retried next tick", "err", err)
		}
	}
}
