package processors

import (
	"encoding/json"

	"github.com/driftguard/driftguard/internal/envelope"
)

// Event is one decoded input record, as a policy sees it.
type Event struct {
	envelope.Fields
	// Body is the raw webhook body, byte for byte as signed.
	Body         json.RawMessage
	ReceivedAtMs int64
}

// Decision is a policy's verdict on one event.
type Decision struct {
	Outcome string
	Reason  string
	// Version is the event's version (its log-order version when the stream
	// has no version pointer).
	Version int64
	Gap     int64
}

// Applied reports whether the decision changed the entity's state.
func (d Decision) Applied() bool { return d.Outcome == envelope.OutcomeApplied }

// decideLatest is the `latest` policy: a new event id applies only when its
// version is greater than the last applied one; a stream without a version
// applies each new event id in log order. It mutates e and depends on
// nothing but e and ev, so the same log always yields the same table.
func decideLatest(e *Entity, ev Event, dedupIDs int) Decision {
	if e.seen(ev.EventID) {
		return Decision{Outcome: envelope.OutcomeDuplicate, Version: ev.Version}
	}
	e.remember(ev.EventID, dedupIDs)
	version := ev.Version
	if !ev.HasVersion {
		version = e.Version + 1
	}
	if e.Applied && version <= e.Version {
		return Decision{Outcome: envelope.OutcomeStale, Version: version}
	}
	var gap int64
	if e.Applied {
		gap = version - e.Version - 1
	}
	e.Applied = true
	e.Version = version
	e.State = ev.Body
	e.UpdatedAtMs = ev.ReceivedAtMs
	return Decision{Outcome: envelope.OutcomeApplied, Version: version, Gap: gap}
}
