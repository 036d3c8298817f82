package decide

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// act is operator action name on key, requested by ops, with id.
func act(id, key string, name record.ActionName, confirm bool) Action {
	a := record.Action{EventID: id, Action: name, Key: key, RequestedBy: "ops", Confirm: confirm}
	body, _ := json.Marshal(a)
	return Action{Action: a, Body: body}
}

func TestActionsRefusedWhereTheyMeanNothing(t *testing.T) {
	for _, c := range []struct {
		stream string
		action record.ActionName
	}{
		{"presence", record.ActionSkipGap}, {"orders", record.ActionSkipGap}, {"chat", record.ActionSkipGap},
		{"presence", record.ActionRelease}, {"workflow", record.ActionRelease}, {"chat", record.ActionRelease},
		{"chat", record.ActionAbandon}, {"chat", record.ActionReset},
	} {
		r := For(testenv.Shipped(t, c.stream))
		var e Entity
		got := r.Act(&e, act("a1", "k", c.action, true))
		if !slices.Equal(summary(got), []decided{{"a1", record.Rejected, record.ReasonActionNotSupported}}) {
			t.Errorf("%s on %s: %+v", c.action, c.stream, summary(got))
		}
		if r.Supports(c.action) == nil {
			t.Errorf("%s on %s: supported", c.action, c.stream)
		}
		if len(e.Recent) != 0 {
			t.Errorf("%s on %s: a refused action touched the dedup memory", c.action, c.stream)
		}
	}
}

func TestActionsOnAWorkflow(t *testing.T) {
	r := For(testenv.Shipped(t, "workflow"))
	var e Entity
	for _, ev := range []Event{step("s1", 1, "queued"), step("s4", 4, "progress"), step("s5", 5, "progress"), step("s7", 7, "running")} {
		r.Decide(&e, ev)
	}
	// Nothing to skip yet on another key, and reset needs its confirmation.
	if got := r.Act(&Entity{}, act("n", "op", record.ActionSkipGap, false)); !slices.Equal(summary(got), []decided{{"n", record.Rejected, record.ReasonNothingToDo}}) {
		t.Fatalf("skip-gap without a gap: %+v", summary(got))
	}
	if got := r.Act(&e, act("r0", "op", record.ActionReset, false)); !slices.Equal(summary(got), []decided{{"r0", record.Rejected, record.ReasonConfirmationRequired}}) || e.Version != 1 {
		t.Fatalf("reset without confirmation: %+v, version %d", summary(got), e.Version)
	}
	got := r.Act(&e, act("sg", "op", record.ActionSkipGap, false))
	want := []decided{{"sg", record.Actioned, ""}, {"", record.Skipped, ""}, {"s4", record.Applied, ""}, {"s5", record.Applied, ""},
		{"", record.Skipped, ""}, {"s7", record.Applied, ""}}
	if !slices.Equal(summary(got), want) {
		t.Fatalf("skip-gap: %+v, want %+v", summary(got), want)
	}
	if skipped := got.Decisions[1]; skipped.Version != 2 || skipped.Gap != 2 || got.Decisions[4].Version != 6 || got.Decisions[4].Gap != 1 {
		t.Fatalf("skipped rows: %+v, %+v", skipped, got.Decisions[4])
	}
	for _, d := range got.Decisions {
		if d.Action != record.ActionSkipGap || d.RequestedBy != "ops" {
			t.Fatalf("decision %+v does not name the action and its requester", d)
		}
	}
	if e.Version != 7 || len(e.Buffer) != 0 || e.DeadlineMs != 0 || got.Replay != 0 {
		t.Fatalf("after skip-gap: %+v", e)
	}
	// The same request again is a duplicate.
	if got := r.Act(&e, act("sg", "op", record.ActionSkipGap, false)); !slices.Equal(summary(got), []decided{{"sg", record.Duplicate, ""}}) {
		t.Fatalf("repeated action: %+v", summary(got))
	}
	r.Decide(&e, step("s9", 9, "progress"))
	got = r.Act(&e, act("ab", "op", record.ActionAbandon, false))
	if !slices.Equal(summary(got), []decided{{"ab", record.Actioned, ""}, {"s9", record.Rejected, record.ReasonTerminal}}) || !got.ChangesState() {
		t.Fatalf("abandon: %+v", summary(got))
	}
	state, _, err := r.PublicState(&e, "op")
	if err != nil || !e.Terminal || !e.Abandoned {
		t.Fatalf("abandoned entity: %v %+v", err, e)
	}
	var public map[string]any
	if err := json.Unmarshal(state, &public); err != nil || public["abandoned"] != true || public["status"] != "running" {
		t.Fatalf("abandoned state %s", state)
	}
	if got := r.Decide(&e, step("s8", 8, "progress")); !slices.Equal(summary(got), []decided{{"s8", record.Rejected, record.ReasonTerminal}}) {
		t.Fatalf("a step after abandon: %+v", summary(got))
	}
	if got := r.Act(&e, act("ab2", "op", record.ActionAbandon, false)); !slices.Equal(summary(got), []decided{{"ab2", record.Rejected, record.ReasonTerminal}}) {
		t.Fatalf("abandon twice: %+v", summary(got))
	}
	revision := e.Revision()
	got = r.Act(&e, act("rs", "op", record.ActionReset, true))
	if !slices.Equal(summary(got), []decided{{"rs", record.Actioned, ""}}) || e.Terminal || e.Applied || e.Revision() != revision {
		t.Fatalf("reset: %+v, entity %+v", summary(got), e)
	}
	if got := r.Decide(&e, step("again1", 1, "queued")); !slices.Equal(summary(got), []decided{{"again1", record.Applied, ""}}) {
		t.Fatalf("first step after reset: %+v", summary(got))
	}
	if e.Revision() <= revision {
		t.Fatalf("revision %d after reset, %d before: the next state record would not replace the last", e.Revision(), revision)
	}
}

func TestReleaseAndResetOnAnOrder(t *testing.T) {
	r := For(testenv.Shipped(t, "orders"))
	var e Entity
	if got := r.Act(&e, act("rl0", "ord", record.ActionRelease, false)); !slices.Equal(summary(got), []decided{{"rl0", record.Rejected, record.ReasonNothingToDo}}) {
		t.Fatalf("release without children: %+v", summary(got))
	}
	r.Decide(&e, orderEvent("p1", "order.payment_received", 0))
	r.Decide(&e, orderEvent("c1", "payment.captured", 0))
	got := r.Act(&e, act("rl", "ord", record.ActionRelease, false))
	want := []decided{{"rl", record.Actioned, ""}, {"p1", record.Expired, record.ReasonReleased}, {"c1", record.Expired, record.ReasonReleased}}
	if !slices.Equal(summary(got), want) || deadLetter(got) != record.ReasonReleased || len(e.Quarantine) != 0 || e.DeadlineMs != 0 {
		t.Fatalf("release: %+v, entity %+v", summary(got), e)
	}
	// The parent now comes: nothing is left to reconcile.
	if got := r.Decide(&e, orderEvent("o", "order.created", 0)); !slices.Equal(summary(got), []decided{{"o", record.Applied, ""}}) {
		t.Fatalf("parent after release: %+v", summary(got))
	}
	var held Entity
	r.Decide(&held, orderEvent("p2", "order.shipped", 0))
	got = r.Act(&held, act("rs", "ord", record.ActionReset, true))
	if !slices.Equal(summary(got), []decided{{"rs", record.Actioned, ""}, {"p2", record.Rejected, record.ReasonReset}}) || deadLetter(got) != record.ReasonReset || len(held.Quarantine) != 0 {
		t.Fatalf("reset with a child waiting: %+v", summary(got))
	}
}

// workflowHistory draws deliveries of steps 1..n of operation op, each
// perhaps twice, in any order, none terminal.
func workflowHistory(t *rapid.T, label string, from, n int) []Event {
	var evs []Event
	for seq := from; seq < from+n; seq++ {
		ev := step(fmt.Sprintf("%s-%d", label, seq), int64(seq), "progress")
		evs = append(evs, ev)
		if rapid.Bool().Draw(t, "redelivered") {
			evs = append(evs, ev)
		}
	}
	return rapid.Permutation(evs).Draw(t, label)
}

// After skip-gap, every sequence up to the last applied one is applied or
// skipped exactly once, whatever came before the skip and after it, and
// the steps after it are decided by the gapless rule from there on.
func TestSkipGapThenLaterStepsProperty(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	rapid.Check(t, func(t *rapid.T) {
		r := For(s)
		var e Entity
		all := workflowHistory(t, "s", 1, rapid.IntRange(1, 25).Draw(t, "steps"))
		cut := rapid.IntRange(0, len(all)).Draw(t, "skip after")
		covered := map[int64]int{}
		record1 := func(f Effects) {
			for _, d := range f.Decisions {
				switch d.Outcome {
				case record.Applied:
					covered[d.Version]++
				case record.Skipped:
					for seq := d.Version; seq < d.Version+d.Gap; seq++ {
						covered[seq]++
					}
				}
			}
		}
		for _, ev := range all[:cut] {
			record1(r.Decide(&e, ev))
		}
		maxHeld := e.Version
		for _, b := range e.Buffer {
			maxHeld = max(maxHeld, b.Version)
		}
		record1(r.Act(&e, act("skip", "op", record.ActionSkipGap, false)))
		if e.Version != maxHeld || len(e.Buffer) != 0 || e.DeadlineMs != 0 {
			t.Fatalf("after skip-gap: version %d (want %d), buffer %d, deadline %d", e.Version, maxHeld, len(e.Buffer), e.DeadlineMs)
		}
		for _, ev := range all[cut:] {
			before := e.Version
			f := r.Decide(&e, ev)
			if ev.Version <= before && f.Decisions[0].Outcome != record.Stale && f.Decisions[0].Outcome != record.Duplicate {
				t.Fatalf("step %d at or below version %d: %s", ev.Version, before, f.Decisions[0].Outcome)
			}
			record1(f)
		}
		for seq := int64(1); seq <= e.Version; seq++ {
			if covered[seq] != 1 {
				t.Fatalf("sequence %d applied or skipped %d times (version %d)", seq, covered[seq], e.Version)
			}
		}
		for seq := range covered {
			if seq > e.Version {
				t.Fatalf("sequence %d decided past version %d", seq, e.Version)
			}
		}
	})
}

// Once abandoned, an entity never changes again, on any policy that
// takes the action: every new event is rejected as terminal.
func TestAbandonIsTerminalProperty(t *testing.T) {
	streams := []string{"workflow", "orders", "presence"}
	rapid.Check(t, func(t *rapid.T) {
		s := testenv.Shipped(t, rapid.SampledFrom(streams).Draw(t, "stream"))
		r := For(s)
		var e Entity
		events := func(label string) []Event {
			var evs []Event
			for i := range rapid.IntRange(0, 12).Draw(t, label) {
				id := fmt.Sprintf("%s-%d", label, i)
				var ev Event
				switch s.Name {
				case "workflow":
					ev = step(id, int64(rapid.IntRange(1, 15).Draw(t, "seq")), "progress")
				case "orders":
					ev = orderEvent(id, rapid.SampledFrom([]string{"order.created", "order.shipped", "payment.captured"}).Draw(t, "type"), 0)
				default:
					ev = Event{Fields: envelope.Fields{Key: "op", EventID: id, Version: int64(rapid.IntRange(1, 15).Draw(t, "version")), HasVersion: true},
						Body: json.RawMessage(fmt.Sprintf(`{"presence":"BUSY","id":%q}`, id))}
				}
				evs = append(evs, ev)
			}
			return evs
		}
		before := events("before")
		for _, ev := range before {
			r.Decide(&e, ev)
		}
		if got := r.Act(&e, act("abandon", "op", record.ActionAbandon, false)); got.Decisions[0].Outcome != record.Actioned && !e.Terminal {
			t.Fatalf("abandon: %+v", summary(got))
		}
		frozen, _ := json.Marshal(e.State)
		version := e.Version
		for _, ev := range events("after") {
			f := r.Decide(&e, ev)
			for _, d := range f.Decisions {
				if d.Outcome != record.Rejected || d.Reason != record.ReasonTerminal {
					t.Fatalf("%s after abandon: %s %s", d.Event.EventID, d.Outcome, d.Reason)
				}
			}
		}
		// A redelivery of an event decided before is a duplicate, as for
		// any terminal entity; it changes nothing either.
		for _, ev := range before {
			if f := r.Decide(&e, ev); f.ChangesState() {
				t.Fatalf("redelivered %s changed an abandoned entity", ev.EventID)
			}
		}
		if now, _ := json.Marshal(e.State); string(now) != string(frozen) || e.Version != version || !e.Abandoned || len(e.Buffer)+len(e.Quarantine) != 0 {
			t.Fatalf("abandoned entity changed: %s at %d, was %s at %d", now, e.Version, frozen, version)
		}
	})
}

// After a confirmed reset, the key is decided as if it had never been
// seen: the decisions of what comes next equal those of a fresh entity,
// and its revisions keep growing.
func TestResetForgetsProperty(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	rapid.Check(t, func(t *rapid.T) {
		r := For(s)
		var e, fresh Entity
		for _, ev := range workflowHistory(t, "old", 1, rapid.IntRange(0, 10).Draw(t, "old steps")) {
			r.Decide(&e, ev)
		}
		revision := e.Revision()
		held := len(e.Buffer)
		got := r.Act(&e, act("reset", "op", record.ActionReset, true))
		if got.Decisions[0].Outcome != record.Actioned || len(got.Decisions) != 1+held {
			t.Fatalf("reset: %+v with %d held", summary(got), held)
		}
		for _, ev := range workflowHistory(t, "new", 1, rapid.IntRange(1, 10).Draw(t, "new steps")) {
			a, b := r.Decide(&e, ev), r.Decide(&fresh, ev)
			if !slices.Equal(summary(a), summary(b)) || a.Replay != b.Replay {
				t.Fatalf("%s after reset: %+v, on a fresh key %+v", ev.EventID, summary(a), summary(b))
			}
		}
		if e.Version != fresh.Version || string(e.State) != string(fresh.State) || len(e.Buffer) != len(fresh.Buffer) {
			t.Fatalf("after reset: version %d, fresh %d", e.Version, fresh.Version)
		}
		if fresh.Applied && e.Revision() <= revision {
			t.Fatalf("revision %d after reset, %d before", e.Revision(), revision)
		}
	})
}

// Release gives up on every child waiting at that moment, each exactly
// once and to the DLQ, whatever arrived before it; the parent after it
// reconciles nothing, and later children apply directly.
func TestReleaseExpiresEveryWaitingChildOnceProperty(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	rapid.Check(t, func(t *rapid.T) {
		r := For(s)
		var e Entity
		children := []string{"order.payment_received", "payment.captured", "order.shipped"}
		n := rapid.IntRange(0, 10).Draw(t, "children")
		var waiting []string
		for i := range n {
			id := fmt.Sprintf("c%d", i)
			f := r.Decide(&e, orderEvent(id, rapid.SampledFrom(children).Draw(t, "type"), int64(i)))
			if f.Decisions[0].Outcome == record.Quarantined {
				waiting = append(waiting, id)
			}
			if rapid.Bool().Draw(t, "redelivered") {
				r.Decide(&e, orderEvent(id, "order.shipped", int64(i)))
			}
		}
		got := r.Act(&e, act("rel", "ord", record.ActionRelease, false))
		if len(waiting) == 0 {
			if !slices.Equal(summary(got), []decided{{"rel", record.Rejected, record.ReasonNothingToDo}}) {
				t.Fatalf("release with nothing waiting: %+v", summary(got))
			}
			return
		}
		var released []string
		for _, d := range got.Decisions[1:] {
			if d.Outcome != record.Expired || d.Reason != record.ReasonReleased || d.DeadLetter != record.ReasonReleased {
				t.Fatalf("released child %+v", d)
			}
			released = append(released, d.Event.EventID)
		}
		if got.Decisions[0].Outcome != record.Actioned || !slices.Equal(released, waiting) || len(e.Quarantine) != 0 || e.DeadlineMs != 0 {
			t.Fatalf("released %v, waiting were %v", released, waiting)
		}
		if f := r.Decide(&e, orderEvent("parent", "order.created", 100)); len(f.Decisions) != 1 || !f.Decisions[0].Applied() {
			t.Fatalf("parent after release: %+v", summary(f))
		}
		if f := r.Decide(&e, orderEvent("late", "order.shipped", 101)); !f.Decisions[0].Applied() {
			t.Fatalf("child after the parent: %+v", summary(f))
		}
	})
}
