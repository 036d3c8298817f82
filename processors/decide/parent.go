package decide

import (
	"slices"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// joined is latest plus a parent join (lost+found): a child whose parent
// has not been applied is quarantined under the parent's key, applied with
// outcome reconciled when the parent is, and expired to the DLQ when its
// TTL passes first. A child whose parent exists applies directly. Once the
// entity is terminal, every new event is rejected, and so are the children
// still waiting when a terminal event reconciles.
type joined struct {
	stream *config.Stream
	latest latest
}

func (p joined) decide(e *Entity, ev Event) Effects {
	if p.stream.IsChild(ev.Type) && !e.ParentSeen {
		return p.quarantine(e, ev)
	}
	effects := p.latest.decide(e, ev)
	if !p.stream.IsParent(ev.Type) || !effects.Decisions[0].Applied() {
		return effects
	}
	e.ParentSeen = true
	// Every waiting child, in arrival order, in the same table update.
	for _, child := range e.Quarantine {
		d := Decision{Event: child, Outcome: record.Reconciled, Version: e.Version + 1}
		if e.Terminal {
			d.Outcome, d.Reason, d.Version = record.Rejected, record.ReasonTerminal, child.Version
		} else {
			e.apply(child, d.Version)
		}
		effects.Decisions = append(effects.Decisions, d)
	}
	e.Quarantine = nil
	e.DeadlineMs = 0
	return effects
}

func (p joined) quarantine(e *Entity, ev Event) Effects {
	// A child still waiting is never stored twice, even if the dedup
	// memory has let its id go.
	if !e.firstSight(&e.Row, ev, p.latest.dedup) || slices.ContainsFunc(e.Quarantine, func(c Event) bool { return c.identity() == ev.identity() }) {
		return one(ev, record.Duplicate, "", ev.Version)
	}
	if effects, ok := rejectTerminal(e, ev, ev.Version); ok {
		return effects
	}
	if effects, full := overflow(e.Quarantine, ev, p.stream.Parent.Buffer, p.stream.Limits.BufferBytes); full {
		return effects
	}
	e.Quarantine = append(e.Quarantine, ev)
	if expiry := ev.ReceivedAtMs + p.stream.Parent.TTL.Milliseconds(); e.DeadlineMs == 0 || expiry < e.DeadlineMs {
		e.DeadlineMs = expiry
	}
	effects := one(ev, record.Quarantined, "", ev.Version)
	effects.Decisions[0].BufferDepth = len(e.Quarantine)
	return effects
}

// expire moves every child whose TTL has passed to the DLQ, and keeps the
// deadline of the earliest one still waiting.
func (p joined) expire(e *Entity, nowMs int64) Effects {
	ttl := p.stream.Parent.TTL.Milliseconds()
	var effects Effects
	waiting := e.Quarantine[:0]
	e.DeadlineMs = 0
	for _, child := range e.Quarantine {
		expiry := child.ReceivedAtMs + ttl
		if expiry <= nowMs {
			effects.Decisions = append(effects.Decisions, Decision{
				Event: child, Outcome: record.Expired, Reason: record.ReasonOrphanTTL,
				Version: child.Version, DeadLetter: record.ReasonOrphanTTL,
			})
			continue
		}
		waiting = append(waiting, child)
		if e.DeadlineMs == 0 || expiry < e.DeadlineMs {
			e.DeadlineMs = expiry
		}
	}
	e.Quarantine = waiting
	if len(e.Quarantine) == 0 {
		e.Quarantine = nil
	}
	return effects
}
