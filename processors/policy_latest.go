package processors

import "github.com/driftguard/driftguard/internal/envelope"

// latest applies a new event id only when its version is greater than the
// last applied one; a stream without a version applies each new event id in
// log order. Gaps are allowed and counted.
type latest struct{ dedupIDs int }

func (p latest) decide(e *Entity, ev Event) Effects {
	if e.seen(ev.EventID) {
		return one(ev, envelope.OutcomeDuplicate, "", ev.Version)
	}
	e.remember(ev.EventID, p.dedupIDs)
	version := ev.Version
	if !ev.HasVersion {
		version = e.Version + 1
	}
	if e.Applied && version <= e.Version {
		return one(ev, envelope.OutcomeStale, "", version)
	}
	var gap int64
	if e.Applied {
		gap = version - e.Version - 1
	}
	e.apply(ev, version)
	effects := one(ev, envelope.OutcomeApplied, "", version)
	effects.Decisions[0].Gap = gap
	return effects
}
