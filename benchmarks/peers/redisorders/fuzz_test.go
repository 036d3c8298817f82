package main

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/benchmarks/peers/peertest"
)

// Whatever signed body arrives, the peer answers 202, 400 or 422, and what
// it hands to Redis is an event of a known role with its ids within the
// schema's bounds and the order id taken from the field of that role.
//
//	go test -run '^$' -fuzz FuzzPayload -fuzztime 20000x ./peers/redisorders
func FuzzPayload(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"e1","event_type":"order.created","order_id":"o1","payload":{"amount_cents":5}}`,
		`{"event_id":"e2","event_type":"payment.captured","parent_id":"o1","payload":{}}`,
		`{"event_id":"e3","event_type":"order.shipped","order_id":"o1","payload":{}}`,
		`{"event_id":"e4","event_type":"order.created","order_id":"o1","payload":[]}`,
		`{"event_id":"e5","event_type":"refund","order_id":"o1","payload":{}}`,
		`[1,2]`, `null`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	edge, c := peertest.Edge(f, "orders", "")
	store := newStore(nil, Options{}, nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		var applied *orderEvent
		store.apply = func(_ context.Context, kind role, order, eventID string, _ []byte) (string, error) {
			applied = &orderEvent{ID: eventID, role: kind, order: order}
			return peer.OutcomeApplied, nil
		}
		rec := c.ServeSigned(t, store.Handler(edge), edge, body)
		switch rec.Code {
		case http.StatusAccepted:
			ev := applied
			if ev == nil {
				t.Fatal("202 without applying")
			}
			if ev.ID == "" || len(ev.ID) > 256 || ev.order == "" || len(ev.order) > 256 {
				t.Fatalf("applied %+v", ev)
			}
			var sent orderEvent
			if err := json.Unmarshal(body, &sent); err != nil {
				t.Fatalf("202 for a body encoding/json refuses: %v", err)
			}
			switch {
			case sent.EventType == "order.created" && (ev.role != parentType || ev.order != sent.OrderID),
				sent.EventType != "order.created" && (ev.role != childType || ev.order != sent.ParentID):
				t.Fatalf("%s applied as %+v", body, ev)
			}
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			if applied != nil {
				t.Fatalf("%d after applying %+v", rec.Code, applied)
			}
		default:
			t.Fatalf("answered %d", rec.Code)
		}
	})
}
