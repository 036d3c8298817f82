package processors

import (
	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
)

// ReasonOrphanTTL is the reason of a child that expired without its parent.
const ReasonOrphanTTL = "orphan_ttl"

// joined is latest plus a parent join (lost+found): a child whose parent
// has not been applied is quarantined under the parent's key, applied with
// outcome reconciled when the parent is, and expired to the DLQ when its
// TTL passes first. A child whose parent exists applies directly.
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
		version := e.Version + 1
		e.apply(child, version)
		effects.Decisions = append(effects.Decisions, Decision{Event: child, Outcome: envelope.OutcomeReconciled, Version: version})
	}
	e.Quarantine = nil
	e.DeadlineMs = 0
	return effects
}

func (p joined) quarantine(e *Entity, ev Event) Effects {
	if !e.firstSight(ev.EventID, p.stream.Limits.DedupIDs) {
		return one(ev, envelope.OutcomeDuplicate, "", ev.Version)
	}
	if effects, full := overflow(e.Quarantine, ev, p.stream.Parent.Buffer, p.stream.Limits.BufferBytes); full {
		return effects
	}
	e.Quarantine = append(e.Quarantine, ev)
	if expiry := ev.ReceivedAtMs + p.stream.Parent.TTL.Milliseconds(); e.DeadlineMs == 0 || expiry < e.DeadlineMs {
		e.DeadlineMs = expiry
	}
	effects := one(ev, envelope.OutcomeQuarantined, "", ev.Version)
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
				Event: child, Outcome: envelope.OutcomeExpired, Reason: ReasonOrphanTTL,
				Version: child.Version, DeadLetter: ReasonOrphanTTL,
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
