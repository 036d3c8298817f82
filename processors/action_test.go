package processors

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A control record is decided by the rules in the key's order, its rows
// naming the action and who asked; one that does not parse, or is keyed
// apart from its body, goes to the DLQ and the partition keeps flowing.
func TestProcessorDecidesControlRecords(t *testing.T) {
	tt, names := startRun(t, testenv.Shipped(t, "workflow"), Options{})
	outQ, dlq := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.DLQ)
	step := func(seq int) []byte {
		return fmt.Appendf(nil, `{"event_id":"op-%d","operation_id":"op","sequence":%d,"status":"progress","occurred_at":"2026-01-01T00:00:00Z"}`, seq, seq)
	}
	control := withHeaders(goka.Headers{record.HeaderType: []byte(record.ControlType)})
	action := func(id, key string) []byte {
		body, _ := json.Marshal(record.Action{EventID: id, Action: record.ActionSkipGap, Key: key, RequestedBy: "alice"})
		return body
	}
	tt.Consume(names.In, "op", step(1))
	tt.Consume(names.In, "op", step(3))
	tt.Consume(names.In, "op", []byte(`{"action":"skip-gap"`), control)
	tt.Consume(names.In, "other", action("a0", "op"), control)
	tt.Consume(names.In, "op", action("a1", "op"), control)
	tt.Consume(names.In, "op", step(4))

	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, fmt.Sprintf("%s %s %d %s %s", o.EventID, o.Outcome, o.Version, o.Action, o.RequestedBy))
	}
	want := []string{"op-1 applied 1  ", "op-3 buffered 3  ", "a1 actioned 1 skip-gap alice", " skipped 2 skip-gap alice",
		"op-3 applied 3 skip-gap alice", "op-4 applied 4  "}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes\n%q\nwant\n%q", got, want)
	}
	var reasons []record.Reason
	for _, dl := range records[record.DeadLetter](t, dlq) {
		reasons = append(reasons, dl.Reason)
	}
	if !slices.Equal(reasons, []record.Reason{record.ReasonUndecodable, record.ReasonUndecodable}) {
		t.Fatalf("DLQ reasons %v", reasons)
	}
	if e := tt.TableValue(goka.GroupTable(goka.Group("workflow")), "op").(*tableValue); e.Version != 4 || len(e.Buffer) != 0 {
		t.Fatalf("table value %+v", e.Entity)
	}
}
