package processors

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/driftguard/driftguard/internal/envelope"
)

// After a crash goka redelivers inputs whose decisions its table may
// already hold: they must get their first outcomes again, drained
// successors included, with the state, and write the table value again
// unchanged; the next new input is decided as usual.
func TestRedeliveredInputRepeatsItsDecisions(t *testing.T) {
	step := func(id string, seq int64, status string) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"operation_id":"op","sequence":%d,"status":%q,"occurred_at":"2026-01-01T00:00:00Z"}`, id, seq, status)
	}
	inputs := [][]byte{step("s2", 2, "running"), step("s1", 1, "queued"), step("s1", 1, "queued"), step("s3", 3, "running")}
	table := goka.GroupTable(goka.Group("workflow"))
	// The broker redelivers a record as it was, received_at included.
	received := tester.WithHeaders(goka.Headers{envelope.HeaderReceivedAt: []byte("1700000000123")})
	clock := func(ms int64) Options { return Options{Now: func() time.Time { return time.UnixMilli(ms) }} }

	first, _, names := startTester(t, workflow(t), clock(1000))
	firstOut := first.NewQueueTracker(names.Outcomes)
	for _, in := range inputs {
		first.Consume(names.In, "op", in, received)
	}
	want := outcomes(t, firstOut)
	if got := len(want); got != 5 { // buffered, applied, applied (drained), duplicate, applied
		t.Fatalf("%d outcomes before the crash: %+v", got, want)
	}
	ahead := first.TableValue(table, "op").(*Entity)

	// The restarted processor's table holds every decision; its input
	// starts again at offset 0.
	second, _, _ := startTester(t, workflow(t), clock(2000))
	second.SetTableValue(table, "op", ahead)
	out, state := second.NewQueueTracker(names.Outcomes), second.NewQueueTracker(names.State)
	changelog := second.NewQueueTracker(string(table))
	for _, in := range inputs {
		second.Consume(names.In, "op", in, received)
	}
	if got := outcomes(t, out); !reflect.DeepEqual(got, want) {
		t.Errorf("redelivered inputs got\n%+v\nwant their first outcomes\n%+v", got, want)
	}
	if n := state.Hwm() - state.NextOffset(); n != 2 {
		t.Errorf("%d state records for two redelivered applying inputs", n)
	}
	// The table value is written again each time: the crash may have lost
	// its changelog record.
	if n := changelog.Hwm() - changelog.NextOffset(); n != int64(len(inputs)) {
		t.Errorf("%d table writes for %d redelivered inputs", n, len(inputs))
	}
	if after := second.TableValue(table, "op").(*Entity); !reflect.DeepEqual(after, ahead) {
		t.Errorf("redelivery changed the table:\n%+v\nwas\n%+v", after, ahead)
	}

	second.Consume(names.In, "op", step("s4", 4, "completed"), received)
	if got := outcomes(t, out); len(got) != 1 || got[0].Outcome != envelope.OutcomeApplied || got[0].InputOffset != 4 || got[0].ProcessedAtMs != 2000 {
		t.Errorf("the next input: %+v", got)
	}
}

// The memory of decided inputs keeps the last decidedMemory inputs of the
// last decidedWindow, whatever the key's traffic.
func TestDecidedMemoryIsBounded(t *testing.T) {
	var e Entity
	decide := func(offset, atMs int64) {
		ev := Event{InputOffset: offset}
		e.rememberDecided(ev, one(ev, envelope.OutcomeApplied, "", offset), atMs)
	}
	for offset := range int64(decidedMemory + 10) {
		decide(offset, 1000)
	}
	if len(e.Decided) != decidedMemory || e.Decided[0].Offset != 10 || e.NextInput != decidedMemory+10 {
		t.Fatalf("%d inputs remembered from offset %d, next input %d", len(e.Decided), e.Decided[0].Offset, e.NextInput)
	}
	decide(500, 1000+decidedWindow.Milliseconds()+1)
	if len(e.Decided) != 1 || e.Decided[0].Offset != 500 {
		t.Fatalf("after the window: %+v", e.Decided)
	}
}
