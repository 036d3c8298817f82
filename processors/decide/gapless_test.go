package decide

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
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
	id      string
	outcome record.Result
	reason  record.Reason
}

func summary(effects Effects) []decided {
	var out []decided
	for _, d := range effects.Decisions {
		out = append(out, decided{d.Event.EventID, d.Outcome, d.Reason})
	}
	return out
}

func TestGaplessDecisions(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	s.Limits.Buffer = 2
	p := For(s)
	var e Entity
	steps := []struct {
		ev     Event
		want   []decided
		replay int64
		dlq    record.Reason
	}{
		{step("a", 1, "queued"), []decided{{"a", "applied", ""}}, 0, ""},
		{step("c", 3, "progress"), []decided{{"c", "buffered", ""}}, 2, ""},
		{step("d", 4, "progress"), []decided{{"d", "buffered", ""}}, 2, ""},
		{step("e", 5, "progress"), []decided{{"e", "rejected", record.ReasonBufferFull}}, 0, record.ReasonBufferFull},
		{step("c2", 3, "progress"), []decided{{"c2", "duplicate", record.ReasonSameSequence}}, 0, ""},
		{step("c", 3, "progress"), []decided{{"c", "duplicate", ""}}, 0, ""},
		{step("a2", 1, "queued"), []decided{{"a2", "stale", ""}}, 0, ""},
		// 2 fills the gap: 3 and 4 drain, each applied.
		{step("b", 2, "running"), []decided{{"b", "applied", ""}, {"c", "applied", ""}, {"d", "applied", ""}}, 0, ""},
		{step("e", 5, "progress"), []decided{{"e", "duplicate", ""}}, 0, ""},
		{step("e2", 5, "progress"), []decided{{"e2", "applied", ""}}, 0, ""},
		{step("g", 7, "running"), []decided{{"g", "buffered", ""}}, 6, ""},
		// 6 completes the operation: the buffered 7 can never apply.
		{step("f", 6, "completed"), []decided{{"f", "applied", ""}, {"g", "rejected", record.ReasonTerminal}}, 0, ""},
		{step("h", 8, "running"), []decided{{"h", "rejected", record.ReasonTerminal}}, 0, ""},
	}
	for i, st := range steps {
		got := p.Decide(&e, st.ev)
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
	s := testenv.Shipped(t, "workflow")
	s.Limits.BufferBytes = 100
	p := For(s)
	var e Entity
	p.Decide(&e, step("a", 1, "queued"))
	big := step("z", 9, "progress")
	big.Body = json.RawMessage(`{"pad":"` + string(make([]byte, 120)) + `"}`)
	if got := p.Decide(&e, big); deadLetter(got) != record.ReasonBufferFull {
		t.Fatalf("a body over buffer_bytes was buffered: %+v", summary(got))
	}
}

// deadLetter is the DLQ reason of the effects' decisions, "" for none.
func deadLetter(effects Effects) record.Reason {
	for _, d := range effects.Decisions {
		if d.DeadLetter != "" {
			return d.DeadLetter
		}
	}
	return ""
}

func TestGaplessGapTimeoutReportsAndNeverSkips(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	s.Limits.GapTimeout = time.Minute
	p := For(s)
	var e Entity
	at := func(ev Event, ms int64) Event { ev.ReceivedAtMs = ms; return ev }
	p.Decide(&e, at(step("a", 1, "queued"), 1_000))
	p.Decide(&e, at(step("c", 3, "running"), 2_000))
	if e.DeadlineMs != 62_000 {
		t.Fatalf("deadline %d, want received_at + gap timeout", e.DeadlineMs)
	}
	got := p.Expire(&e, 62_000)
	if len(got.Decisions) != 1 || got.Decisions[0].Outcome != record.Expired || got.Decisions[0].Reason != record.ReasonGapTimeout ||
		got.Decisions[0].Version != 2 || got.Replay != 2 || e.DeadlineMs != 122_000 {
		t.Fatalf("gap timeout: %+v, next deadline %d", got, e.DeadlineMs)
	}
	if e.Version != 1 || len(e.Buffer) != 1 {
		t.Fatalf("the gap was skipped: version %d buffer %d", e.Version, len(e.Buffer))
	}
	p.Decide(&e, at(step("b", 2, "running"), 130_000))
	if e.Version != 3 || e.DeadlineMs != 0 || e.GapSinceMs != 0 {
		t.Fatalf("after the gap filled: version %d deadline %d", e.Version, e.DeadlineMs)
	}
}
