// Package model is what every contender of the benchmarks is checked
// against: the deliveries the load generator sent and what it was told,
// and the final state each stream's events must leave, as the load
// generator computes it and as each contender reports it. Its JSON is the
// contract between the load generator, the contenders and the checker.
package model

// Delivery is one webhook the load generator sent, as it ended: one line
// of sent.jsonl.
type Delivery struct {
	Stream  string `json:"stream"`
	EventID string `json:"event_id"`
	Key     string `json:"key"`
	// Status is the HTTP status of the last attempt, 0 when no answer came.
	Status int `json:"status"`
	// Attempts counts the sends of this delivery (retries included).
	Attempts int `json:"attempts"`
	// SentAtMicros is when the first attempt started (unix µs); AckMicros
	// how long the last attempt took to answer.
	SentAtMicros int64 `json:"sent_at_us"`
	AckMicros    int64 `json:"ack_us"`
	// Phase is the part of the run the delivery belongs to: PhaseSetup,
	// PhaseWarmup, PhaseMeasure, PhaseCooldown or PhaseFinal. Only the
	// measured phase counts in throughput and latency figures; every
	// phase counts in the verdict.
	Phase string `json:"phase,omitempty"`
	// Type is the event type (orders and chat: the body's type field).
	Type string `json:"type,omitempty"`
}

// The phases of a run, in the order they are sent. Setup deliveries
// (chat's members) are all acknowledged before the rest start, and final
// ones (chat's receipts) are sent after everything else was
// acknowledged, so that what they depend on is in the log before them.
const (
	PhaseSetup    = "setup"
	PhaseWarmup   = "warmup"
	PhaseMeasure  = "measure"
	PhaseCooldown = "cooldown"
	PhaseFinal    = "final"
)

// Accepted reports whether the contender took the delivery: a 2xx.
func (d Delivery) Accepted() bool { return d.Status >= 200 && d.Status < 300 }

// State is the final state of one run, per stream.
type State struct {
	Presence map[string]Presence `json:"presence,omitempty"` // by user_id
	Orders   map[string]Order    `json:"orders,omitempty"`   // by order_id
	// Workflow and Chat are checked on driftguard only: the peers take
	// presence and orders.
	Workflow map[string]Workflow     `json:"workflow,omitempty"` // by operation_id
	Chat     map[string]Conversation `json:"chat,omitempty"`     // by conversation_id
}

// Presence is a user's last applied presence.
type Presence struct {
	Presence       string `json:"presence"`
	SequenceNumber int64  `json:"sequence_number"`
}

// Order is an order and its children as applied: each child event id
// once, sorted.
type Order struct {
	Created  bool     `json:"created"`
	Children []string `json:"children"`
}

// Workflow is an operation's last applied step: the step before the first
// one that never came (gapless), or its terminal step.
type Workflow struct {
	Sequence int64  `json:"sequence"`
	Status   string `json:"status"`
}

// Conversation is a chat conversation as the assign policy leaves it: how
// many messages it numbered, its members (sorted) and each member's read
// and delivery cursors.
type Conversation struct {
	LastSeq int64             `json:"last_seq"`
	Members []string          `json:"members"`
	Cursors map[string]Cursor `json:"cursors,omitempty"`
}

// Cursor is a member's read and delivery position in a conversation.
type Cursor struct {
	Read      int64 `json:"read,omitempty"`
	Delivered int64 `json:"delivered,omitempty"`
}
