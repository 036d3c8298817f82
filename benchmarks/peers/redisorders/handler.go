package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
)

// orderEvent is the shipped orders payload (DESIGN.md §2): the parent
// order.created carries order_id, its children parent_id.
type orderEvent struct {
	ID        string          `json:"event_id"`
	EventType string          `json:"event_type"`
	OrderID   string          `json:"order_id"`
	ParentID  string          `json:"parent_id"`
	Payload   json.RawMessage `json:"payload"`

	// role and order are what check found: the event's part in the join
	// and its order's id.
	role  role
	order string
}

// role is what an event type is to the join.
type role uint8

const (
	unknownType role = iota
	parentType
	childType
)

// check records what ev lacks, and its role and its order's id.
func (ev *orderEvent) check(c *peer.Check, roles map[string]role) {
	c.ID("/event_id", ev.ID)
	ev.role = roles[ev.EventType]
	switch ev.role {
	case parentType:
		c.ID("/order_id", ev.OrderID)
		ev.order = ev.OrderID
	case childType:
		c.ID("/parent_id", ev.ParentID)
		ev.order = ev.ParentID
	default:
		if ev.EventType == "" {
			c.Add("/event_type", "missing required property")
		} else {
			c.Add("/event_type", "unknown event type "+strconv.Quote(ev.EventType))
		}
	}
	switch {
	case len(ev.Payload) == 0:
		c.Add("/payload", "missing required property")
	case ev.Payload[0] != '{':
		c.Add("/payload", "must be an object")
	}
}

// EventID names the event in the peer's answer.
func (ev *orderEvent) EventID() string { return ev.ID }

// Handler applies each webhook in one script before it answers: 202 with
// the outcome once Redis ran it, 503 when Redis failed (the script ran
// whole or not at all: a retry applies it, or is a duplicate).
func (s *Store) Handler(edge *peer.Edge) http.Handler {
	stream := edge.Stream()
	roles := map[string]role{}
	for _, t := range stream.Parent.Types {
		roles[t] = parentType
	}
	for _, t := range stream.Parent.Children {
		roles[t] = childType
	}
	check := func(ev *orderEvent, c *peer.Check) { ev.check(c, roles) }
	return peer.Handler(edge, check, func(ctx context.Context, ev *orderEvent, body []byte) (string, error) {
		return s.apply(ctx, ev.role, ev.order, ev.ID, body)
	})
}

// applyEvent runs the script of the event's role.
func (s *Store) applyEvent(ctx context.Context, kind role, order, eventID string, body []byte) (string, error) {
	if kind == childType {
		outcome, err := s.applyChild(ctx, order, eventID, body)
		if outcome == peer.OutcomeRejected {
			s.log.Warn("lost+found full", "order_id", order, "event_id", eventID, "buffer", s.opts.OrphanBuffer)
		}
		return outcome, err
	}
	outcome, reconciled, expired, err := s.applyParent(ctx, order, eventID, body)
	if expired > 0 {
		s.log.Info("orphans expired", "order_id", order, "expired", expired, "reconciled", reconciled)
	}
	return outcome, err
}
