package processors

import (
	"encoding/json"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
)

// Event is one decoded input record, as a policy sees it. Buffered events
// are stored in the table as they are, so a drained successor is reported
// with its own id, clocks and input position.
type Event struct {
	envelope.Fields
	// Body is the raw webhook body, byte for byte as signed.
	Body         json.RawMessage `json:"body"`
	ReceivedAtMs int64           `json:"received_at_ms"`
	// Terminal is true when the event moves the entity to one of the
	// stream's terminal states.
	Terminal       bool  `json:"terminal,omitempty"`
	InputPartition int32 `json:"input_partition"`
	InputOffset    int64 `json:"input_offset"`
	// Device is the device the event is about, "" for the entity itself
	// (streams with devices).
	Device string `json:"device,omitempty"`
	// Value is the body's devices.derive field (streams with devices).
	Value string `json:"value,omitempty"`
}

// Decision is a policy's verdict on one event.
type Decision struct {
	// Event is what was decided: the input, or a buffered successor that
	// the input made contiguous.
	Event   Event
	Outcome string
	Reason  string
	// Version is the event's version (its log-order version when the stream
	// has no version pointer).
	Version     int64
	Gap         int64
	BufferDepth int
	// MessageID is the message a chat send was assigned (assign).
	MessageID string
	// DeadLetter, when set, is the reason to copy the event to the DLQ.
	DeadLetter string
}

// Applied reports whether the decision changed the entity's state.
func (d Decision) Applied() bool { return d.Outcome == envelope.OutcomeApplied }

// changesState reports whether the decision changed the entity's public
// state: an applied event, or a quarantined child applied when its parent
// came. Each such decision takes a revision and the input writes a state
// record.
func (d Decision) changesState() bool {
	return d.Applied() || d.Outcome == envelope.OutcomeReconciled
}

// Effects are everything one input causes besides the table write.
type Effects struct {
	Decisions []Decision
	// Replay is the first missing sequence to request from the producer;
	// 0 requests nothing.
	Replay int64
}

// policy decides events for one stream. decide mutates e and depends on
// nothing but e and ev, so the same log always yields the same table.
type policy interface {
	decide(e *Entity, ev Event) Effects
}

func policyFor(s *config.Stream) policy {
	switch {
	case s.Policy == config.PolicyGapless:
		return gapless{stream: s}
	case s.Policy == config.PolicyAssign:
		return assign{stream: s}
	case s.Joined():
		return joined{stream: s, latest: latest{dedupIDs: s.Limits.DedupIDs, ttl: s.TTL}}
	}
	return latest{dedupIDs: s.Limits.DedupIDs, ttl: s.TTL, maxDevices: s.Limits.Devices}
}

// one is the effects of a single decision on the input.
func one(ev Event, outcome, reason string, version int64) Effects {
	return Effects{Decisions: []Decision{{Event: ev, Outcome: outcome, Reason: reason, Version: version}}}
}

// apply makes ev the entity's state at version.
func (e *Entity) apply(ev Event, version int64) {
	e.Applied = true
	e.Version = version
	e.State = ev.Body
	e.UpdatedAtMs = ev.ReceivedAtMs
	e.Terminal = e.Terminal || ev.Terminal
}
