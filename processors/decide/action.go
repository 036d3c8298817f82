package decide

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
)

// Action is an operator action as the rules see it: the control record's
// value and where it sits in `<stream>.in`.
type Action struct {
	record.Action
	// Body is the control record's value, kept as the payload of the
	// action's outcome row.
	Body           json.RawMessage
	ReceivedAtMs   int64
	InputPartition int32
	InputOffset    int64
}

// event is the action as the event its own outcome row is about.
func (a Action) event() Event {
	return Event{
		Fields: envelope.Fields{Key: a.Key, EventID: a.EventID, Type: record.ControlType},
		Body:   a.Body, ReceivedAtMs: a.ReceivedAtMs, InputPartition: a.InputPartition, InputOffset: a.InputOffset,
	}
}

// Supports reports, as an error an operator can read, why action means
// nothing under the stream's policy, or nil when it does:
//
//	action    latest  latest+parent  gapless  assign
//	skip-gap  -       -              yes      -
//	abandon   yes     yes            yes      -
//	release   -       yes            -        -
//	reset     yes     yes            yes      -
//
// A conversation (assign) takes none: its sequences and membership are
// what its readers resume from, and no action may move them back or end
// them.
func (r *Rules) Supports(action record.ActionName) error {
	s := r.stream
	var ok bool
	switch action {
	case record.ActionSkipGap:
		ok = s.Policy == config.PolicyGapless
	case record.ActionRelease:
		ok = s.Joined()
	case record.ActionAbandon, record.ActionReset:
		ok = s.Policy != config.PolicyAssign
	default:
		return fmt.Errorf("unknown action %q", action)
	}
	if !ok {
		policy := string(s.Policy)
		if s.Joined() {
			policy += " with a parent join"
		}
		return fmt.Errorf("%s means nothing on stream %s (policy %s)", action, s.Name, policy)
	}
	return nil
}

// Act decides operator action a for entity e, which it updates, in order
// with the key's events. Its first decision is the action's own: actioned,
// or rejected with the reason it was refused; the decisions after it are
// what it did to the events the entity held. Every decision names the
// action and who asked.
func (r *Rules) Act(e *Entity, a Action) Effects {
	ev := a.event()
	var effects Effects
	switch {
	case r.Supports(a.Action.Action) != nil:
		// Refused before anything is touched, the dedup memory included.
		effects = one(ev, record.Rejected, record.ReasonActionNotSupported, e.Version)
	case !e.firstSight(&e.Row, ev, dedupOf(r.stream)):
		effects = one(ev, record.Duplicate, "", e.Version)
	default:
		e.startRevisions()
		effects = r.act(e, a, ev)
	}
	for i := range effects.Decisions {
		effects.Decisions[i].Action, effects.Decisions[i].RequestedBy = a.Action.Action, a.RequestedBy
	}
	effects = e.revised(effects)
	effects.Evicted, e.evicted = e.evicted, 0
	return effects
}

func (r *Rules) act(e *Entity, a Action, ev Event) Effects {
	switch a.Action.Action {
	case record.ActionSkipGap:
		return skipGap(e, ev)
	case record.ActionAbandon:
		return abandon(e, ev)
	case record.ActionRelease:
		return release(e, ev)
	}
	return reset(e, a, ev)
}

// skipGap applies everything the gapless buffer holds, in sequence order,
// and records each gap before a buffered step skipped: the operator says
// the missing steps will never come. A terminal step stops it as it stops
// a drain: what is after it is rejected.
func skipGap(e *Entity, ev Event) Effects {
	if len(e.Buffer) == 0 {
		return one(ev, record.Rejected, record.ReasonNothingToDo, e.Version)
	}
	effects := one(ev, record.Actioned, "", e.Version)
	for _, next := range e.Buffer {
		if e.Terminal {
			effects.Decisions = append(effects.Decisions, Decision{Event: next, Outcome: record.Rejected, Reason: record.ReasonTerminal, Version: next.Version})
			continue
		}
		gap := next.Version - e.Version - 1
		if gap > 0 {
			missing := e.Version + 1
			effects.Decisions = append(effects.Decisions, Decision{
				Event:   Event{Fields: envelope.Fields{Key: ev.Key, Type: "gap", Version: missing}, ReceivedAtMs: ev.ReceivedAtMs},
				Outcome: record.Skipped, Version: missing, Gap: gap,
			})
		}
		e.apply(next, next.Version)
		effects.Decisions = append(effects.Decisions, Decision{Event: next, Outcome: record.Applied, Version: next.Version, Gap: gap})
	}
	e.Buffer = nil
	e.GapSinceMs, e.DeadlineMs = 0, 0
	return effects
}

// abandon closes the entity in a terminal state, as a terminal event
// would: what it holds (buffered steps, quarantined children) can never
// apply and is rejected, and so is every new event after it.
func abandon(e *Entity, ev Event) Effects {
	if e.Terminal {
		return one(ev, record.Rejected, record.ReasonTerminal, e.Version)
	}
	effects := one(ev, record.Actioned, "", e.Version)
	for _, held := range slices.Concat(e.Buffer, e.Quarantine) {
		effects.Decisions = append(effects.Decisions, Decision{Event: held, Outcome: record.Rejected, Reason: record.ReasonTerminal, Version: held.Version})
	}
	e.Terminal, e.Abandoned = true, true
	e.Buffer, e.Quarantine = nil, nil
	e.GapSinceMs, e.DeadlineMs = 0, 0
	return effects
}

// release expires every child quarantined under the parent now, as its
// TTL would: each to the DLQ, archived as permanently orphaned.
func release(e *Entity, ev Event) Effects {
	if len(e.Quarantine) == 0 {
		return one(ev, record.Rejected, record.ReasonNothingToDo, e.Version)
	}
	effects := one(ev, record.Actioned, "", e.Version)
	for _, child := range e.Quarantine {
		effects.Decisions = append(effects.Decisions, Decision{
			Event: child, Outcome: record.Expired, Reason: record.ReasonReleased,
			Version: child.Version, DeadLetter: record.ReasonReleased,
		})
	}
	e.Quarantine, e.DeadlineMs = nil, 0
	return effects
}

// reset forgets the key: the next event for it is decided as the first
// ever. What it held is rejected and copied to the DLQ, from where it can
// be redriven. Only the revision counter survives, so that the key's next
// state record still replaces its last one downstream; the dedup memory
// keeps the reset's own id alone.
func reset(e *Entity, a Action, ev Event) Effects {
	if !a.Confirm {
		return one(ev, record.Rejected, record.ReasonConfirmationRequired, e.Version)
	}
	effects := one(ev, record.Actioned, "", e.Version)
	for _, held := range slices.Concat(e.Buffer, e.Quarantine) {
		effects.Decisions = append(effects.Decisions, Decision{
			Event: held, Outcome: record.Rejected, Reason: record.ReasonReset,
			Version: held.Version, DeadLetter: record.ReasonReset,
		})
	}
	*e = Entity{NextRevision: e.NextRevision, evicted: e.evicted}
	e.Recent = EventIDs{{Hash: idHash(ev.EventID), AtMs: ev.ReceivedAtMs}}
	return effects
}
