package processors

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Every decision names itself: by the position of the input that made it
// (a drained successor by its draining input's, not its own) and its index
// among that input's decisions, or by the timer's key, deadline and kind.
// No two decisions share one; the ids depend on nothing but the input's
// position or the timer, so an input decided again after an aborted
// transaction repeats them.
func TestDecisionIDs(t *testing.T) {
	s := testenv.Shipped(t, "workflow")
	step := func(id string, seq int64) []byte {
		return fmt.Appendf(nil, `{"event_id":%q,"operation_id":"op","sequence":%d,"status":"running","occurred_at":"2026-01-01T00:00:00Z"}`, id, seq)
	}
	inputs := [][]byte{step("s2", 2), step("s1", 1), step("s1", 1), step("s4", 4)}
	received := withHeaders(goka.Headers{record.HeaderReceivedAt: []byte("1700000000000")})
	table := goka.GroupTable(goka.Group("workflow"))
	deadline := int64(1_700_000_000_000) + s.Limits.GapTimeout.Milliseconds()

	first, names := startRun(t, s, Options{})
	out := first.NewQueueTracker(names.Outcomes)
	for _, in := range inputs {
		first.Consume(names.In, "op", in, received)
	}
	beforeTick := first.TableValue(table, "op").(*tableValue)
	if beforeTick.DeadlineMs != deadline {
		t.Fatalf("deadline %d, want %d", beforeTick.DeadlineMs, deadline)
	}
	if err := first.VisitAll(t.Context(), tickVisitor, deadline); err != nil {
		t.Fatal(err)
	}
	got := outcomes(t, out)
	want := []struct {
		event   string
		outcome record.Result
		id      string
	}{
		{"s2", record.Buffered, "workflow/0/0/0"},
		{"s1", record.Applied, "workflow/0/1/0"},
		{"s2", record.Applied, "workflow/0/1/1"}, // drained by s1: s1's position
		{"s1", record.Duplicate, "workflow/0/2/0"},
		{"s4", record.Buffered, "workflow/0/3/0"},
		{"", record.Expired, fmt.Sprintf("workflow/t/%d/gap_timeout/0/op", deadline)},
	}
	if len(got) != len(want) {
		t.Fatalf("%d outcomes, want %d: %+v", len(got), len(want), got)
	}
	ids := map[string]bool{}
	for i, w := range want {
		if got[i].EventID != w.event || got[i].Outcome != w.outcome || got[i].DecisionID != w.id {
			t.Errorf("outcome %d: %s %s id %q, want %s %s id %q", i, got[i].EventID, got[i].Outcome, got[i].DecisionID, w.event, w.outcome, w.id)
		}
		if ids[got[i].DecisionID] {
			t.Errorf("decision id %q twice", got[i].DecisionID)
		}
		ids[got[i].DecisionID] = true
	}
}

// The children a parent's timer expires together are told apart by their
// index; a retry after the expiry is an input decision.
func TestOrphanTimerDecisionIDs(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Parent.TTL = time.Minute
	tt, names := startRun(t, s, Options{})
	proc := tt
	out := tt.NewQueueTracker(names.Outcomes)
	at := withHeaders(goka.Headers{record.HeaderReceivedAt: []byte("1700000000000")})
	for _, id := range []string{"q1", "q2"} {
		tt.Consume(names.In, "o/3", fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.payment_received","parent_id":"o/3","payload":{}}`, id), at)
	}
	deadline := int64(1_700_000_000_000) + time.Minute.Milliseconds()
	if err := proc.VisitAll(t.Context(), tickVisitor, deadline); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range outcomes(t, out) {
		got = append(got, o.EventID+" "+string(o.Outcome)+" "+o.DecisionID)
	}
	want := []string{
		"q1 quarantined orders/0/0/0",
		"q2 quarantined orders/0/1/0",
		fmt.Sprintf("q1 expired orders/t/%d/orphan_ttl/0/o/3", deadline),
		fmt.Sprintf("q2 expired orders/t/%d/orphan_ttl/1/o/3", deadline),
	}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes\n%q\nwant\n%q", got, want)
	}
}
