package processors

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
)

func step(id string, seq int64, status string) Event {
	terminal := status == "completed" || status == "failed" || status == "cancelled"
	return Event{
		Fields:   envelope.Fields{Key: "op", EventID: id, Version: seq, HasVersion: true},
		Body:     json.RawMessage(fmt.Sprintf(`{"sequence":%d,"status":%q,"id":%q}`, seq, status, id)),
		Terminal: terminal,
	}
}

type decided struct {
	id, outcome, reason string
}

func summary(effects Effects) []decided {
	var out []decided
	for _, d := range effects.Decisions {
		out = append(out, decided{d.Event.EventID, d.Outcome, d.Reason})
	}
	return out
}

func TestGaplessDecisions(t *testing.T) {
	s := workflow(t)
	s.Limits.Buffer = 2
	p := gapless{stream: s}
	var e Entity
	steps := []struct {
		ev     Event
		want   []decided
		replay int64
		dlq    string
	}{
		{step("a", 1, "queued"), []decided{{"a", "applied", ""}}, 0, ""},
		{step("c", 3, "progress"), []decided{{"c", "buffered", ""}}, 2, ""},
		{step("d", 4, "progress"), []decided{{"d", "buffered", ""}}, 2, ""},
		{step("e", 5, "progress"), []decided{{"e", "rejected", ReasonBufferFull}}, 0, ReasonBufferFull},
		{step("c2", 3, "progress"), []decided{{"c2", "duplicate", ReasonSameSequence}}, 0, ""},
		{step("c", 3, "progress"), []decided{{"c", "duplicate", ""}}, 0, ""},
		{step("a2", 1, "queued"), []decided{{"a2", "stale", ""}}, 0, ""},
		// 2 fills the gap: 3 and 4 drain, each applied.
		{step("b", 2, "running"), []decided{{"b", "applied", ""}, {"c", "applied", ""}, {"d", "applied", ""}}, 0, ""},
		{step("e", 5, "progress"), []decided{{"e", "duplicate", ""}}, 0, ""},
		{step("e2", 5, "progress"), []decided{{"e2", "applied", ""}}, 0, ""},
		{step("g", 7, "running"), []decided{{"g", "buffered", ""}}, 6, ""},
		// 6 completes the operation: the buffered 7 can never apply.
		{step("f", 6, "completed"), []decided{{"f", "applied", ""}, {"g", "rejected", ReasonTerminal}}, 0, ""},
		{step("h", 8, "running"), []decided{{"h", "rejected", ReasonTerminal}}, 0, ""},
	}
	for i, st := range steps {
		got := p.decide(&e, st.ev)
		if !slices.Equal(summary(got), st.want) || got.Replay != st.replay || deadLetter(got) != st.dlq {
			t.Fatalf("step %d (%s@%d): got %+v replay %d dlq %q; want %+v replay %d dlq %q",
				i, st.ev.EventID, st.ev.Version, summary(got), got.Replay, deadLetter(got), st.want, st.replay, st.dlq)
		}
	}
	if e.Version != 6 || !e.Terminal || len(e.Buffer) != 0 {
		t.Fatalf("final entity: version %d terminal %v buffer %d", e.Version, e.Terminal, len(e.Buffer))
	}
}

func TestGaplessBufferIsBoundedByBytes(t *testing.T) {
	s := workflow(t)
	s.Limits.BufferBytes = 100
	p := gapless{stream: s}
	var e Entity
	p.decide(&e, step("a", 1, "queued"))
	big := step("z", 9, "progress")
	big.Body = json.RawMessage(`{"pad":"` + string(make([]byte, 120)) + `"}`)
	if got := p.decide(&e, big); deadLetter(got) != ReasonBufferFull {
		t.Fatalf("a body over buffer_bytes was buffered: %+v", summary(got))
	}
}

// Any permutation and duplication of a sequence history, with producer
// retries under new event ids, ends in the state of the ordered replay with
// nothing buffered, and every sequence applies at most once.
func TestGaplessConvergesUnderReorderAndDuplication(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 30).Draw(t, "steps")
		terminalAt := rapid.IntRange(1, n+5).Draw(t, "terminal at") // > n: never
		var history []Event
		for seq := 1; seq <= n; seq++ {
			status := "progress"
			if seq == terminalAt {
				status = "completed"
			}
			history = append(history, step(fmt.Sprintf("s%d", seq), int64(seq), status))
		}
		s := workflow(t)
		s.Limits.Buffer = n + 1
		p := gapless{stream: s}
		var clean Entity
		for _, ev := range history {
			p.decide(&clean, ev)
		}
		var deliveries []Event
		for _, ev := range history {
			deliveries = append(deliveries, redeliveries(t, ev)...)
		}
		var got Entity
		applied := map[int64]int{}
		for _, ev := range rapid.Permutation(deliveries).Draw(t, "order") {
			for _, d := range p.decide(&got, ev).Decisions {
				if d.Applied() {
					applied[d.Version]++
				}
			}
		}
		if got.Version != clean.Version || string(got.State) != string(clean.State) || got.Terminal != clean.Terminal {
			t.Fatalf("final %d %s; ordered replay %d %s", got.Version, got.State, clean.Version, clean.State)
		}
		if len(got.Buffer) != 0 {
			t.Fatalf("%d events left buffered after every sequence arrived", len(got.Buffer))
		}
		for seq, times := range applied {
			if times != 1 {
				t.Fatalf("sequence %d applied %d times", seq, times)
			}
		}
	})
}

// Through goka: outcomes per decision, the replay request, the state.
func TestProcessorWorkflowThroughGoka(t *testing.T) {
	tt, _, names := startTester(t, workflow(t), Options{})
	outQ, replayQ, stateQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.Replay), tt.NewQueueTracker(names.State)
	body := func(id string, seq int, status string) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"operation_id":"op-1","sequence":%d,"status":%q,"occurred_at":"2026-11-30T10:00:00Z"}`, id, seq, status)
	}
	tt.Consume(names.In, "op-1", body("w1", 1, "queued"))
	tt.Consume(names.In, "op-1", body("w3", 3, "completed"))
	tt.Consume(names.In, "op-1", body("w2", 2, "running"))
	tt.Consume(names.In, "op-1", body("w4", 4, "running"))

	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, fmt.Sprintf("%s:%s%s", o.EventID, o.Outcome, map[bool]string{true: "/" + o.Reason, false: ""}[o.Reason != ""]))
	}
	want := []string{"w1:applied", "w3:buffered", "w2:applied", "w3:applied", "w4:rejected/terminal"}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	_, raw, ok := replayQ.NextRaw()
	var req envelope.ReplayRequest
	if !ok || json.Unmarshal(raw, &req) != nil || req.FirstMissing != 2 || req.Key != "op-1" {
		t.Fatalf("replay request %s", raw)
	}
	var last envelope.State
	for {
		_, raw, ok := stateQ.NextRaw()
		if !ok {
			break
		}
		if err := json.Unmarshal(raw, &last); err != nil {
			t.Fatal(err)
		}
	}
	if last.Version != 3 {
		t.Fatalf("final state at version %d, want 3 (completed)", last.Version)
	}
}

// deadLetter is the DLQ reason of the effects' decisions, "" for none.
func deadLetter(effects Effects) string {
	for _, d := range effects.Decisions {
		if d.DeadLetter != "" {
			return d.DeadLetter
		}
	}
	return ""
}
