package processors

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/driftguard/driftguard/internal/envelope"
)

func TestGaplessGapTimeoutReportsAndNeverSkips(t *testing.T) {
	s := workflow(t)
	s.Limits.GapTimeout = time.Minute
	p := gapless{stream: s}
	var e Entity
	at := func(ev Event, ms int64) Event { ev.ReceivedAtMs = ms; return ev }
	p.decide(&e, at(step("a", 1, "queued"), 1_000))
	p.decide(&e, at(step("c", 3, "running"), 2_000))
	if e.DeadlineMs != 62_000 {
		t.Fatalf("deadline %d, want received_at + gap timeout", e.DeadlineMs)
	}
	got := p.expire(&e, 62_000)
	if len(got.Decisions) != 1 || got.Decisions[0].Outcome != envelope.OutcomeExpired || got.Decisions[0].Reason != ReasonGapTimeout ||
		got.Decisions[0].Version != 2 || got.Replay != 2 || e.DeadlineMs != 122_000 {
		t.Fatalf("gap timeout: %+v, next deadline %d", got, e.DeadlineMs)
	}
	if e.Version != 1 || len(e.Buffer) != 1 {
		t.Fatalf("the gap was skipped: version %d buffer %d", e.Version, len(e.Buffer))
	}
	p.decide(&e, at(step("b", 2, "running"), 130_000))
	if e.Version != 3 || e.DeadlineMs != 0 || e.GapSinceMs != 0 {
		t.Fatalf("after the gap filled: version %d deadline %d", e.Version, e.DeadlineMs)
	}
}

// The punctuator fires a due timer through goka's visitor even though no
// further event for the key arrives.
func TestTimersFireWithoutFurtherEvents(t *testing.T) {
	s := workflow(t)
	tt, proc, names := startTester(t, s, Options{})
	outQ, replayQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.Replay)
	headers := goka.Headers{envelope.HeaderReceivedAt: []byte("1700000000000")}
	for _, seq := range []int{1, 3} {
		tt.Consume(names.In, "op-9", fmt.Appendf(nil, `{"event_id":"e%d","operation_id":"op-9","sequence":%d,"status":"running","occurred_at":"2026-11-30T10:00:00Z"}`, seq, seq), tester.WithHeaders(headers))
	}
	outcomes(t, outQ) // applied, buffered
	for replayQ.NextOffset() < replayQ.Hwm() {
		replayQ.NextRaw()
	}
	// Before the deadline nothing fires; after it, the gap is reported.
	deadline := int64(1_700_000_000_000) + s.Limits.GapTimeout.Milliseconds()
	for _, now := range []int64{deadline - 1, deadline} {
		if err := proc.VisitAll(t.Context(), tickVisitor, now); err != nil {
			t.Fatal(err)
		}
	}
	got := outcomes(t, outQ)
	if len(got) != 1 || got[0].Outcome != envelope.OutcomeExpired || got[0].Reason != ReasonGapTimeout || got[0].Version != 2 || got[0].Key != "op-9" {
		t.Fatalf("outcomes after the deadline: %+v", got)
	}
	var replays []string
	for {
		_, raw, ok := replayQ.NextRaw()
		if !ok {
			break
		}
		replays = append(replays, string(raw))
	}
	if len(replays) != 1 || !slices.ContainsFunc(replays, func(r string) bool { return strings.Contains(r, `"first_missing":2`) }) {
		t.Fatalf("replay requests %v, want one for sequence 2", replays)
	}
}
