package main

import (
	"context"
	"net/http"
	"testing"

	"github.com/driftguard/driftguard/benchmarks/peers/peer"
	"github.com/driftguard/driftguard/benchmarks/peers/peertest"
)

// Whatever signed body arrives, the peer answers 202, 400 or 422, and what
// it hands to PostgreSQL is a whole presence event within the schema's
// bounds.
//
//	go test -run '^$' -fuzz FuzzPayload -fuzztime 20000x ./peers/pgpresence
func FuzzPayload(f *testing.F) {
	for _, seed := range []string{
		`{"event_id":"e1","user_id":"u1","presence":"ONLINE","sequence_number":1,"timestamp":1700000000}`,
		`{"event_id":"e1","user_id":"u1","presence":"BUSY","sequence_number":9007199254740991,"timestamp":0,"device_id":"d"}`,
		`{"event_id":"","user_id":"u1","presence":"AWAY","sequence_number":1,"timestamp":1}`,
		`{"event_id":"e1","user_id":"u1","presence":"OFFLINE","sequence_number":1.5,"timestamp":1}`,
		`{"event_id":"e1","user_id":"u1","presence":"ONLINE","sequence_number":-1,"timestamp":1}`,
		`[1,2]`, `null`, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	edge, c := peertest.Edge(f, "presence", "")
	f.Fuzz(func(t *testing.T, body []byte) {
		var applied *presenceEvent
		h := peer.Handler(edge, (*presenceEvent).check, func(_ context.Context, ev *presenceEvent, _ []byte) (string, error) {
			applied = ev
			return peer.OutcomeApplied, nil
		})
		code := c.ServeSigned(t, h, edge, body).Code
		switch code {
		case http.StatusAccepted:
			if applied == nil {
				t.Fatal("202 without applying")
			}
			ev := applied
			if ev.ID == "" || len(ev.ID) > 256 || ev.UserID == "" || len(ev.UserID) > 256 ||
				ev.SequenceNumber == nil || *ev.SequenceNumber < 0 || *ev.SequenceNumber > 1<<53-1 ||
				ev.Timestamp == nil || *ev.Timestamp < 0 {
				t.Fatalf("applied %+v", ev)
			}
			switch ev.Presence {
			case "ONLINE", "BUSY", "AWAY", "OFFLINE":
			default:
				t.Fatalf("applied presence %q", ev.Presence)
			}
		case http.StatusBadRequest, http.StatusUnprocessableEntity:
			if applied != nil {
				t.Fatalf("%d after applying %+v", code, applied)
			}
		default:
			t.Fatalf("answered %d", code)
		}
	})
}
