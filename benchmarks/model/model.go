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
}

// State is the final state of one run, per stream.
type State struct {
	Presence map[string]Presence `json:"presence,omitempty"` // by user_id
	Orders   map[string]Order    `json:"orders,omitempty"`   // by order_id
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
