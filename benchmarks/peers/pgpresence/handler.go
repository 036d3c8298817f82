package main

import (
	"context"
	"net/http"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
)

// presenceEvent is the shipped presence payload (DESIGN.md §2); device_id
// and expires_at are not part of the seed's design and are ignored.
type presenceEvent struct {
	ID             string `json:"event_id"`
	UserID         string `json:"user_id"`
	Presence       string `json:"presence"`
	SequenceNumber *int64 `json:"sequence_number"`
	Timestamp      *int64 `json:"timestamp"`
}

// maxSequence is the schema's bound: the largest integer a JSON number
// carries exactly.
const maxSequence = 1<<53 - 1

func (ev *presenceEvent) check(c *peer.Check) {
	c.ID("/event_id", ev.ID)
	c.ID("/user_id", ev.UserID)
	switch ev.Presence {
	case "ONLINE", "BUSY", "AWAY", "OFFLINE":
	case "":
		c.Add("/presence", "missing required property")
	default:
		c.Add("/presence", "must be one of ONLINE, BUSY, AWAY, OFFLINE")
	}
	switch {
	case ev.SequenceNumber == nil:
		c.Add("/sequence_number", "missing required property")
	case *ev.SequenceNumber < 0 || *ev.SequenceNumber > maxSequence:
		c.Add("/sequence_number", "must be between 0 and 2^53-1")
	}
	switch {
	case ev.Timestamp == nil:
		c.Add("/timestamp", "missing required property")
	case *ev.Timestamp < 0:
		c.Add("/timestamp", "must not be negative")
	}
}

// EventID names the event in the peer's answer.
func (ev *presenceEvent) EventID() string { return ev.ID }

// Handler applies each webhook in one transaction before it answers: 202
// with the outcome once committed, 503 when PostgreSQL failed (the
// transaction then changed nothing, and the retry applies it).
func (s *Store) Handler(edge *peer.Edge) http.Handler {
	return peer.Handler(edge, (*presenceEvent).check, func(ctx context.Context, ev *presenceEvent, _ []byte) (string, error) {
		return s.apply(ctx, ev)
	})
}
