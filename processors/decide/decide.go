// Package decide holds driftguard's ordering rules as pure functions: the
// policies (latest, with device rows; gapless; assign), the parent join
// (lost+found) and terminal states. Each rule takes an entity's state and
// one event (or, for timers, the time the caller says it is) and returns
// the entity's new state and the decisions as data. Nothing here reads a
// clock or talks to Kafka, so the same input log always gives the same
// table, state and outcomes, and every rule can be tested without a broker.
// The goka runtime that feeds the rules lives in package processors.
package decide

import (
	"encoding/json"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
)

// Event is one decoded input record, as the rules see it. Buffered events
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
	// Member is who an assign event is about: a send's sender, the member
	// added or removed, a receipt's reader.
	Member string `json:"member,omitempty"`
	// ClientKey is what makes a send idempotent: its device and client
	// message id (assign).
	ClientKey string `json:"client_key,omitempty"`
	// Seq is the sequence a receipt has reached (assign).
	Seq int64 `json:"seq,omitempty"`
	// RedriveOf is, for a dead letter redriven into `<stream>.in`, the
	// dead letter's position (record.HeaderRedriveOf); "" otherwise.
	RedriveOf string `json:"redrive_of,omitempty"`
}

// identity is what the dedup memory knows the event by: its event id, or
// for a redriven dead letter its id with the dead letter's position. The
// original delivery is remembered under its id, so a redrive under that id
// would be a duplicate of it; under its own identity it is decided again,
// and a second redrive of the same dead letter is a duplicate of the
// first.
func (ev Event) identity() string {
	if ev.RedriveOf == "" {
		return ev.EventID
	}
	return ev.EventID + "\x00redrive\x00" + ev.RedriveOf
}

// Decision is a rule's verdict on one event.
type Decision struct {
	// Event is what was decided: the input, or a buffered successor that
	// the input made contiguous.
	Event   Event
	Outcome record.Result
	Reason  record.Reason
	// Version is the event's version (its log-order version when the stream
	// has no version pointer).
	Version     int64
	Gap         int64
	BufferDepth int
	// MessageID is the message a send was assigned (assign).
	MessageID string
	// AcceptedAtMs is, for a retried send, when the send that was
	// assigned the sequence was received (assign).
	AcceptedAtMs int64
	// DeadLetter, when set, is the reason to copy the event to the DLQ.
	DeadLetter record.Reason
	// Action and RequestedBy name the operator action that made the
	// decision, and who asked (Rules.Act).
	Action      record.ActionName
	RequestedBy string
}

// Applied reports whether the decision applied its event.
func (d Decision) Applied() bool { return d.Outcome == record.Applied }

// ChangesState reports whether the decision changed the entity's public
// state: an applied event, or a quarantined child applied when its parent
// came, or an abandon (the state then says so). Each such decision takes
// a revision, and the input writes a state record.
func (d Decision) ChangesState() bool {
	return d.Applied() || d.Outcome == record.Reconciled || (d.Outcome == record.Actioned && d.Action == record.ActionAbandon)
}

// Effects are everything one input, or one timer, causes besides the
// entity's new state.
type Effects struct {
	Decisions []Decision
	// Replay is the first missing sequence to request from the producer;
	// 0 requests nothing.
	Replay int64
	// Evicted is how many remembered event ids the count bound
	// (limits.dedup_ids) pushed out of the dedup memory while they were
	// still inside limits.dedup_window: early evictions, after which a
	// retry of such an id is no longer known as a duplicate. The runtime
	// counts them.
	Evicted int
}

// ChangesState reports whether any of the decisions changed the entity's
// public state.
func (f Effects) ChangesState() bool {
	for _, d := range f.Decisions {
		if d.ChangesState() {
			return true
		}
	}
	return false
}

// Rules are the ordering rules of one stream.
type Rules struct {
	stream *config.Stream
	policy policy
	reader reader
}

// policy decides events for one stream. decide mutates e and depends on
// nothing but e and ev; expire fires the timers due at nowMs and sets the
// entity's next deadline.
type policy interface {
	decide(e *Entity, ev Event) Effects
	expire(e *Entity, nowMs int64) Effects
}

// For returns the rules of stream s, which must be valid.
func For(s *config.Stream) *Rules {
	var p policy
	switch {
	case s.Policy == config.PolicyGapless:
		p = gapless{stream: s}
	case s.Policy == config.PolicyAssign:
		p = assign{stream: s, roles: s.Assign.Roles()}
	case s.Joined():
		p = joined{stream: s, latest: latestOf(s)}
	default:
		p = latestOf(s)
	}
	return &Rules{stream: s, policy: p, reader: reader{stream: s, roles: s.Assign.Roles(),
		derivePointer: "/" + envelope.EscapePointer(s.Devices.Derive)}}
}

// Stream is the stream the rules decide.
func (r *Rules) Stream() *config.Stream { return r.stream }

// Decide decides one event for entity e, which it updates, and gives every
// decision that changed the public state its revision.
func (r *Rules) Decide(e *Entity, ev Event) Effects {
	e.startRevisions()
	effects := e.revised(r.policy.decide(e, ev))
	effects.Evicted, e.evicted = e.evicted, 0
	return effects
}

// Expire fires e's timers that are due at nowMs (the caller's clock, which
// the processors take from the input watermark), as Decide does events.
func (r *Rules) Expire(e *Entity, nowMs int64) Effects {
	if e.DeadlineMs == 0 || e.DeadlineMs > nowMs {
		return Effects{}
	}
	e.startRevisions()
	return e.revised(r.policy.expire(e, nowMs))
}

// one is the effects of a single decision on the input.
func one(ev Event, outcome record.Result, reason record.Reason, version int64) Effects {
	return Effects{Decisions: []Decision{{Event: ev, Outcome: outcome, Reason: reason, Version: version}}}
}

// rejectTerminal is the rejection of ev by an entity in a terminal state,
// and ok is false while the entity is not in one. Every policy checks it
// right after its duplicate check: a redelivery of an event already decided
// stays a duplicate, anything new is rejected.
func rejectTerminal(e *Entity, ev Event, version int64) (effects Effects, ok bool) {
	if !e.Terminal {
		return Effects{}, false
	}
	return one(ev, record.Rejected, record.ReasonTerminal, version), true
}

// noTimers is the expire of a policy without timers: nothing is due, and a
// deadline found in the table (written under another configuration) is
// dropped.
func noTimers(e *Entity) Effects {
	e.DeadlineMs = 0
	return Effects{}
}

// apply makes ev the entity's state at version.
func (e *Entity) apply(ev Event, version int64) {
	e.Applied = true
	e.Version = version
	e.State = ev.Body
	e.UpdatedAtMs = ev.ReceivedAtMs
	e.Terminal = e.Terminal || ev.Terminal
}
