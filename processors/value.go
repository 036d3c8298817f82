package processors

import "github.com/driftguard/driftguard/processors/decide"

// tableValue is the per-key value of the group table `<stream>-table`: the
// rules' entity, and the runtime's memory of what the key's recent inputs
// decided, which answers their redelivery after a crash (redeliver.go).
// Its JSON (how tables of earlier releases stored it) has the entity's
// fields and these two side by side.
type tableValue struct {
	decide.Entity
	// NextInput is one past the input offset of the last record decided for
	// this key (a key's records share one partition), 0 before any.
	NextInput int64 `json:"next_input,omitempty"`
	// Decided is what the key's recent inputs decided, oldest first.
	Decided decidedLog `json:"decided,omitzero"`
}
