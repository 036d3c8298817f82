package decide

import (
	"slices"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
)

// gapless applies exactly last+1, buffers what is ahead of a gap and asks
// the producer to replay the first missing sequence; it never skips a gap.
// Producer sequences start at 1. A terminal status is irrevocable.
type gapless struct{ stream *config.Stream }

func (p gapless) decide(e *Entity, ev Event) Effects {
	if !e.firstSight(&e.Row, ev, dedupOf(p.stream)) {
		return one(ev, record.Duplicate, "", ev.Version)
	}
	seq := ev.Version
	if effects, ok := rejectTerminal(e, ev, seq); ok {
		return effects
	}
	switch {
	case seq <= e.Version:
		return one(ev, record.Stale, "", seq)
	case slices.ContainsFunc(e.Buffer, func(b Event) bool { return b.Version == seq }):
		// The same step again under a new event id (a producer retry).
		effects := one(ev, record.Duplicate, record.ReasonSameSequence, seq)
		effects.Decisions[0].BufferDepth = len(e.Buffer)
		return effects
	case seq > e.Version+1:
		return p.buffer(e, ev)
	}
	e.apply(ev, seq)
	effects := one(ev, record.Applied, "", seq)
	// Drain every buffered successor that is now contiguous; after a
	// terminal step, what is left can never apply.
	for len(e.Buffer) > 0 {
		next := e.Buffer[0]
		switch {
		case e.Terminal:
			effects.Decisions = append(effects.Decisions, Decision{Event: next, Outcome: record.Rejected, Reason: record.ReasonTerminal, Version: next.Version})
		case next.Version == e.Version+1:
			e.apply(next, next.Version)
			effects.Decisions = append(effects.Decisions, Decision{Event: next, Outcome: record.Applied, Version: next.Version})
		default:
			// Another gap: keep waiting, ask for its first step, and time
			// it from now.
			effects.Replay = e.Version + 1
			p.openGap(e, ev.ReceivedAtMs)
			return effects
		}
		e.Buffer = e.Buffer[1:]
	}
	e.Buffer = nil
	e.GapSinceMs, e.DeadlineMs = 0, 0
	return effects
}

// openGap starts the gap timer at sinceMs.
func (p gapless) openGap(e *Entity, sinceMs int64) {
	e.GapSinceMs = sinceMs
	e.DeadlineMs = sinceMs + p.stream.Limits.GapTimeout.Milliseconds()
}

// expire reports a gap still open at its deadline and asks for its first
// step again; the gap is never skipped. It fires again every gap timeout
// while the gap stays open.
func (p gapless) expire(e *Entity, nowMs int64) Effects {
	if len(e.Buffer) == 0 {
		e.GapSinceMs, e.DeadlineMs = 0, 0
		return Effects{}
	}
	missing := e.Version + 1
	e.DeadlineMs = nowMs + p.stream.Limits.GapTimeout.Milliseconds()
	return Effects{
		Decisions: []Decision{{
			Event:   Event{Fields: envelope.Fields{Type: "gap", Version: missing}, ReceivedAtMs: e.GapSinceMs},
			Outcome: record.Expired, Reason: record.ReasonGapTimeout, Version: missing, BufferDepth: len(e.Buffer),
		}},
		Replay: missing,
	}
}

// buffer keeps ev until the gap before it is filled, within the stream's
// bounds; overflow is rejected and sent to the DLQ, never kept in memory.
func (p gapless) buffer(e *Entity, ev Event) Effects {
	limits := p.stream.Limits
	if effects, full := overflow(e.Buffer, ev, limits.Buffer, limits.BufferBytes); full {
		return effects
	}
	i, _ := slices.BinarySearchFunc(e.Buffer, ev.Version, func(b Event, seq int64) int { return int(b.Version - seq) })
	e.Buffer = slices.Insert(e.Buffer, i, ev)
	if e.GapSinceMs == 0 {
		p.openGap(e, ev.ReceivedAtMs)
	}
	effects := one(ev, record.Buffered, "", ev.Version)
	effects.Decisions[0].BufferDepth = len(e.Buffer)
	effects.Replay = e.Version + 1
	return effects
}
