package decide_test

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/processors/decide"
	"github.com/driftguard/driftguard/processors/decide/decidetest"
)

// decideHistory runs a model's history through the rules: each delivery
// read and decided, each tick's due timers fired, as the processor does.
// The entity's revision must grow with every change of its public state.
func decideHistory(t *rapid.T, rules *decide.Rules, h decidetest.History) ([]decidetest.Outcome, decidetest.State) {
	var e decide.Entity
	var outs []decidetest.Outcome
	var last decidetest.State
	revision := int64(-1)
	for _, st := range h.Steps {
		var effects decide.Effects
		if st.Body == nil {
			effects = rules.Expire(&e, st.AtMs)
		} else {
			doc, err := envelope.Parse(st.Body)
			if err != nil {
				t.Fatal(err)
			}
			ev, err := rules.Read(doc, "")
			doc.Release()
			if err != nil {
				t.Fatal(err)
			}
			ev.Body, ev.ReceivedAtMs = st.Body, st.AtMs
			effects = rules.Decide(&e, ev)
		}
		for _, d := range effects.Decisions {
			outs = append(outs, decidetest.Outcome{EventID: d.Event.EventID, Outcome: d.Outcome, Reason: d.Reason,
				Version: d.Version, BufferDepth: d.BufferDepth, MessageID: d.MessageID})
		}
		if !effects.ChangesState() {
			continue
		}
		if e.Revision() <= revision {
			t.Fatalf("revision %d after %d", e.Revision(), revision)
		}
		revision = e.Revision()
		state, expires, err := rules.PublicState(&e, h.Key)
		if err != nil {
			t.Fatal(err)
		}
		last = decidetest.State{JSON: state, ExpiresAtMs: expires}
	}
	return outs, last
}

// Every model's histories through the rules.
func TestModels(t *testing.T) {
	for _, m := range decidetest.Models {
		t.Run(m.Stream, func(t *testing.T) {
			s := m.StreamOf(t)
			rules := decide.For(s)
			rapid.Check(t, func(t *rapid.T) {
				h := m.Draw(t, s, "k")
				outs, last := decideHistory(t, rules, h)
				h.Check(t, outs, last)
			})
		})
	}
}

// Orders with a TTL and a buffer drawn per history.
func TestOrdersModelWithDrawnLimits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s := testenv.Shipped(t, "orders")
		s.Parent.TTL = time.Duration(rapid.IntRange(1, 50).Draw(t, "ttl s")) * time.Second
		s.Parent.Buffer = rapid.IntRange(1, 8).Draw(t, "buffer")
		h := decidetest.Orders(t, s, "k")
		outs, last := decideHistory(t, decide.For(s), h)
		h.Check(t, outs, last)
	})
}

// Joins, leaves, re-joins, sends and receipts from members, removed
// members and strangers, under both history policies (the rules keep the
// same facts for both).
func TestMembershipModel(t *testing.T) {
	for _, history := range []string{config.HistoryJoined, config.HistoryShared} {
		t.Run(history, func(t *testing.T) {
			s := testenv.Shipped(t, "chat")
			s.Assign.History = history
			rules := decide.For(s)
			rapid.Check(t, func(t *rapid.T) {
				h, _ := decidetest.Membership(t, s, "k")
				outs, last := decideHistory(t, rules, h)
				h.Check(t, outs, last)
			})
		})
	}
}
