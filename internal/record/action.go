package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Operator actions (skip a gap, abandon, release, reset) travel in
// `<stream>.in` like any event, so the processor decides them in order with
// the key's events and exactly once. What marks one is the dg-type header
// ControlType: ingest derives dg-type from a webhook's body and refuses a
// webhook whose type is reserved (IsReservedType), so no publisher can
// produce it; `driftguard admin` and the admin endpoint write it.

// ControlType is the dg-type of an operator action in `<stream>.in`, and
// the type of the outcome row that decides it.
const ControlType = "driftguard.action"

// ReservedTypePrefix starts every event type driftguard keeps for itself.
const ReservedTypePrefix = "driftguard."

// IsReservedType reports whether an event type is driftguard's own, never
// a publisher's.
func IsReservedType(eventType string) bool {
	return strings.HasPrefix(eventType, ReservedTypePrefix)
}

// ActionName names an operator action.
type ActionName string

// The operator actions (docs/operations.md has a runbook for each).
const (
	// ActionSkipGap applies what a gapless key buffers after its gaps,
	// recording the missing sequences skipped.
	ActionSkipGap ActionName = "skip-gap"
	// ActionAbandon closes the entity in a terminal abandoned state.
	ActionAbandon ActionName = "abandon"
	// ActionRelease expires the children quarantined for a parent now.
	ActionRelease ActionName = "release"
	// ActionReset forgets the key's state; it needs Confirm.
	ActionReset ActionName = "reset"
)

// ActionNames are every action, in the order of the docs.
var ActionNames = []ActionName{ActionSkipGap, ActionAbandon, ActionRelease, ActionReset}

// Action is the value of a control record in `<stream>.in`, keyed by the
// entity key it acts on.
type Action struct {
	// EventID names the request: the outcome rows of its decision carry
	// it, and a redelivery of the same id is decided a duplicate.
	EventID string     `json:"event_id"`
	Action  ActionName `json:"action"`
	Key     string     `json:"key"`
	// RequestedBy is who asked: the operating-system user of the CLI (or
	// its --as), the admin endpoint's caller.
	RequestedBy string `json:"requested_by"`
	// Reason is the operator's note, kept with the decision.
	Reason string `json:"reason,omitempty"`
	// Confirm is the operator's confirmation, required by reset.
	Confirm       bool  `json:"confirm,omitempty"`
	RequestedAtMs int64 `json:"requested_at_ms"`
}

// Validate reports what makes a an action the processor cannot read.
func (a *Action) Validate() error {
	switch {
	case !slices.Contains(ActionNames, a.Action):
		return fmt.Errorf("unknown action %q (one of skip-gap, abandon, release, reset)", a.Action)
	case a.Key == "":
		return errors.New("action without a key")
	case a.EventID == "":
		return errors.New("action without an event id")
	case a.RequestedBy == "":
		return errors.New("action without a requester")
	}
	return nil
}

// DecodeAction reads a control record's value.
func DecodeAction(data []byte) (Action, error) {
	var a Action
	if err := json.Unmarshal(data, &a); err != nil {
		return Action{}, fmt.Errorf("control record: %w", err)
	}
	if err := a.Validate(); err != nil {
		return Action{}, fmt.Errorf("control record: %w", err)
	}
	return a, nil
}
