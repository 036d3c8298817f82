package decide

import (
	"time"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/record"
)

// latest applies a new event id only when its version is greater than the
// last applied one; a stream without a version applies each new event id in
// log order. Gaps are allowed and counted. On a stream with devices, an
// event with a device id is decided the same way against its device's row.
// After a terminal state every new event is rejected.
type latest struct {
	dedup dedup
	ttl   time.Duration
	// maxDevices bounds the device rows of one entity.
	maxDevices int
}

func latestOf(s *config.Stream) latest {
	return latest{dedup: dedupOf(s), ttl: s.TTL, maxDevices: s.Limits.Devices}
}

func (p latest) decide(e *Entity, ev Event) Effects {
	if ev.Device != "" {
		return p.decideDevice(e, ev)
	}
	effects := p.decideRow(e, &e.Row, ev)
	if effects.Decisions[0].Applied() {
		e.apply(ev, effects.Decisions[0].Version)
	}
	return effects
}

func (latest) expire(e *Entity, _ int64) Effects { return noTimers(e) }

// decideRow decides ev against one row of e and, when it applies, records
// the version and the clocks in the row; the caller stores what the row
// shows.
func (p latest) decideRow(e *Entity, r *Row, ev Event) Effects {
	if !e.firstSight(r, ev, p.dedup) {
		return one(ev, record.Duplicate, "", ev.Version)
	}
	version := ev.Version
	if !ev.HasVersion {
		version = r.Version + 1
	}
	if effects, ok := rejectTerminal(e, ev, version); ok {
		return effects
	}
	if r.Applied && version <= r.Version {
		return one(ev, record.Stale, "", version)
	}
	var gap int64
	if r.Applied {
		gap = version - r.Version - 1
	}
	r.Applied = true
	r.Version = version
	r.UpdatedAtMs = ev.ReceivedAtMs
	r.ExpiresAtMs = p.expiresAt(ev)
	effects := one(ev, record.Applied, "", version)
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
