package processors

import (
	"time"

	"github.com/driftguard/driftguard/internal/envelope"
)

// latest applies a new event id only when its version is greater than the
// last applied one; a stream without a version applies each new event id in
// log order. Gaps are allowed and counted.
type latest struct {
	dedupIDs int
	ttl      time.Duration
}

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
	e.ExpiresAtMs = p.expiresAt(ev)
	effects := one(ev, envelope.OutcomeApplied, "", version)
	effects.Decisions[0].Gap = gap
	return effects
}

// expiresAt is when the applied claim goes stale: the source's expires_at,
// else the stream's TTL after the source clock (or after received_at), else
// never (0).
func (p latest) expiresAt(ev Event) int64 {
	switch {
	case ev.ExpiresAtMs != 0:
		return ev.ExpiresAtMs
	case p.ttl == 0:
		return 0
	case ev.OccurredAtMs != 0:
		return ev.OccurredAtMs + p.ttl.Milliseconds()
	}
	return ev.ReceivedAtMs + p.ttl.Milliseconds()
}
