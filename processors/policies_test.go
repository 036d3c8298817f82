package processors

// Every policy through goka: the outcomes, state records, dead letters and
// replay requests the runtime writes for a fixed history of each.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lovoo/goka"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A member with a laptop and a phone, each versioned on its own, then a
// claim about the member itself: every outcome, the state records and the
// table through goka.
func TestProcessorPresenceDevices(t *testing.T) {
	tt, names := startRun(t, testenv.Shipped(t, "presence"), Options{})
	outQ := tt.NewQueueTracker(names.Outcomes)
	stateQ := tt.NewQueueTracker(names.State)
	headers := goka.Headers{record.HeaderReceivedAt: []byte("1700000000123")}
	const ts = 1_700_000_000
	deliveries := []struct {
		id, device string
		version    int64
		status     string
		want       record.Result
		gap        int64
		member     string // the member's derived presence after it
	}{
		{"l5", "laptop", 5, "ONLINE", record.Applied, 0, "ONLINE"},
		{"p2", "phone", 2, "AWAY", record.Applied, 0, "ONLINE"},
		{"l5", "laptop", 5, "ONLINE", record.Duplicate, 0, ""},
		{"l4", "laptop", 4, "AWAY", record.Stale, 0, ""},
		{"p4", "phone", 4, "BUSY", record.Applied, 1, "ONLINE"},
		{"l6", "laptop", 6, "OFFLINE", record.Applied, 0, "BUSY"},
		{"m100", "", 100, "AWAY", record.Applied, 0, "BUSY"},
	}
	for _, d := range deliveries {
		body := testenv.Presence{EventID: d.id, User: "alice", Device: d.device, Status: d.status, Version: d.version, Timestamp: ts}.Body()
		tt.Consume(names.In, "alice", body, withHeaders(headers))
	}
	got := outcomes(t, outQ)
	if len(got) != len(deliveries) {
		t.Fatalf("%d outcomes for %d deliveries", len(got), len(deliveries))
	}
	var wantMembers []string
	for i, d := range deliveries {
		if o := got[i]; o.Outcome != d.want || o.EventID != d.id || o.Version != d.version || o.Gap != d.gap {
			t.Errorf("delivery %d: outcome %s %s@%d gap %d, want %s %s@%d gap %d", i, o.Outcome, o.EventID, o.Version, o.Gap, d.want, d.id, d.version, d.gap)
		}
		if d.member != "" {
			wantMembers = append(wantMembers, d.member)
		}
	}

	states := records[record.State](t, stateQ)
	if len(states) != len(wantMembers) {
		t.Fatalf("%d state records for %d applied changes", len(states), len(wantMembers))
	}
	for i, st := range states {
		var doc struct {
			Presence string                     `json:"presence"`
			Devices  map[string]json.RawMessage `json:"devices"`
		}
		if err := json.Unmarshal(st.State, &doc); err != nil {
			t.Fatal(err)
		}
		if doc.Presence != wantMembers[i] {
			t.Errorf("state %d: member presence %q, want %q (%s)", i, doc.Presence, wantMembers[i], st.State)
		}
		if i > 0 && st.Version <= states[i-1].Version {
			t.Errorf("state %d: version %d after %d; entity_state needs it to grow", i, st.Version, states[i-1].Version)
		}
		if st.UpdatedAtMs != 1700000000123 {
			t.Errorf("state %d: updated_at_ms %d, want the applied event's received_at", i, st.UpdatedAtMs)
		}
		if st.ExpiresAtMs != (ts+300)*1000 {
			t.Errorf("state %d: expires_at_ms %d, want timestamp + ttl", i, st.ExpiresAtMs)
		}
	}
	wantFinal := fmt.Sprintf(`{"event_id":"m100","user_id":"alice","presence":"BUSY","sequence_number":100,"timestamp":%d,"devices":{
		"laptop":{"presence":"OFFLINE","version":6,"updated_at_ms":1700000000123,"expires_at_ms":%d},
		"phone":{"presence":"BUSY","version":4,"updated_at_ms":1700000000123,"expires_at_ms":%[2]d}}}`, ts, (ts+300)*1000)
	if last := states[len(states)-1]; !testenv.SameJSON(last.State, []byte(wantFinal)) || last.Version != 100 {
		t.Errorf("final state %d %s, want 100 %s", last.Version, last.State, wantFinal)
	}

	e := tt.TableValue(goka.GroupTable(goka.Group("presence")), "alice").(*tableValue)
	if e.Version != 100 || e.Devices["laptop"].Version != 6 || e.Devices["phone"].Version != 4 ||
		len(e.Devices["laptop"].Recent) != 3 || e.NextRevision != 101 {
		t.Fatalf("table value %+v laptop %+v phone %+v", e, e.Devices["laptop"], e.Devices["phone"])
	}
}

// Through goka: outcomes per decision, the replay request, the state.
func TestProcessorWorkflowThroughGoka(t *testing.T) {
	tt, names := startRun(t, testenv.Shipped(t, "workflow"), Options{})
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
		got = append(got, fmt.Sprintf("%s:%s%s", o.EventID, o.Outcome, map[bool]string{true: "/" + string(o.Reason), false: ""}[o.Reason != ""]))
	}
	want := []string{"w1:applied", "w3:buffered", "w2:applied", "w3:applied", "w4:rejected/terminal"}
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	_, raw, ok := replayQ.NextRaw()
	var req record.ReplayRequest
	if !ok || json.Unmarshal(raw, &req) != nil || req.FirstMissing != 2 || req.Key != "op-1" {
		t.Fatalf("replay request %s", raw)
	}
	var last record.State
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

// Through goka: the assigned message id on the outcome, and a typing
// indicator written to chat.in by a foreign producer is neither decided nor
// stored.
func TestProcessorChatThroughGoka(t *testing.T) {
	s := testenv.Shipped(t, "chat")
	tt, names := startRun(t, s, Options{})
	outQ := tt.NewQueueTracker(names.Outcomes)
	for _, body := range []string{
		`{"event_id":"j","type":"member.added","conversation_id":"c9","user_id":"u1"}`,
		`{"event_id":"t","type":"typing","conversation_id":"c9","user_id":"u1"}`,
		`{"event_id":"s","type":"message.send","conversation_id":"c9","sender_id":"u1","sender_device_id":"d","client_message_id":"m","body":"hi"}`,
		`{"event_id":"s2","type":"message.send","conversation_id":"c9","sender_id":"u1","sender_device_id":"d","client_message_id":"m","body":"hi"}`,
	} {
		tt.Consume(names.In, "c9", []byte(body))
	}
	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, fmt.Sprintf("%s:%s:%d:%s", o.EventID, o.Outcome, o.Version, o.MessageID))
	}
	if want := []string{"j:applied:0:", "s:applied:1:c9:1", "s2:duplicate:1:c9:1"}; !slices.Equal(got, want) {
		t.Fatalf("outcomes %v, want %v", got, want)
	}
	e := tt.TableValue(goka.GroupTable(goka.Group(s.Name)), "c9").(*tableValue)
	if e.Remembers("t") {
		t.Fatal("the typing indicator was stored in the table")
	}
}

// Through goka, interleaving three orders: a child before its parent, a
// retried child, a retried parent, a child after its parent, an overflowing
// order, orphans expiring, and a parent that loses the race to its child's
// expiry; the DLQ records, the gauge and the three seed metrics.
func TestProcessorLostAndFoundThroughGoka(t *testing.T) {
	s := testenv.Shipped(t, "orders")
	s.Parent.TTL = time.Minute
	s.Parent.Buffer = 2
	reg := prometheus.NewRegistry()
	metrics := NewMetrics(reg)
	// The timer clock stands still before the TTL, so ticks only count.
	clock := func() time.Time { return time.UnixMilli(1_700_000_000_000) }
	tt, names := startRun(t, s, Options{Metrics: metrics, Now: clock})
	proc := tt
	ctx := t.Context()
	outQ, dlqQ := tt.NewQueueTracker(names.Outcomes), tt.NewQueueTracker(names.DLQ)
	at := goka.Headers{record.HeaderReceivedAt: []byte("1700000000000")}
	child := func(id, parent string) {
		tt.Consume(names.In, parent, fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.payment_received","parent_id":%q,"payload":{}}`, id, parent), withHeaders(at))
	}
	parent := func(id, order string) {
		tt.Consume(names.In, order, fmt.Appendf(nil, `{"event_id":%q,"event_type":"order.created","order_id":%q,"payload":{}}`, id, order), withHeaders(at))
	}
	child("p1", "o1")  // before its parent
	child("p2", "o2")  // its order never comes
	child("p1", "o1")  // retried while waiting
	child("q1", "o3")  // o3 overflows its bound of 2
	parent("c1", "o1") // reconciles p1
	child("q2", "o3")
	parent("c1", "o1") // retried parent
	child("q3", "o3")  // over the bound
	child("s1", "o1")  // after its parent

	// A tick counts the children still waiting (p2, q1, q2) for the gauge.
	timersCtx, stopTimers := context.WithCancel(ctx)
	timersDone := make(chan error, 1)
	go func() { timersDone <- proc.RunTimers(timersCtx, 10*time.Millisecond) }()
	if !testenv.Poll(ctx, func() bool { return testutil.ToFloat64(metrics.quarantined.WithLabelValues(s.Name)) == 3 }) {
		t.Fatal("the quarantine gauge never showed the waiting children")
	}
	stopTimers()
	<-timersDone
	// Past the TTL the orphans expire; o2's order then arrives too late.
	if err := proc.VisitAll(ctx, tickVisitor, int64(1_700_000_000_000+time.Minute.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	parent("c2", "o2")
	child("p2", "o2") // a retry of the expired child

	var got []string
	for _, o := range outcomes(t, outQ) {
		got = append(got, o.Key+"/"+o.EventID+":"+string(o.Outcome)+map[bool]string{true: "/" + string(o.Reason)}[o.Reason != ""])
	}
	want := []string{
		"o1/p1:quarantined", "o2/p2:quarantined", "o1/p1:duplicate", "o3/q1:quarantined",
		"o1/c1:applied", "o1/p1:reconciled", "o3/q2:quarantined", "o1/c1:duplicate",
		"o3/q3:rejected/buffer_full", "o1/s1:applied",
		"o2/p2:expired/orphan_ttl", "o3/q1:expired/orphan_ttl", "o3/q2:expired/orphan_ttl",
		"o2/c2:applied", "o2/p2:duplicate",
	}
	slices.Sort(got[10:13]) // the visit order of keys is the storage's
	if !slices.Equal(got, want) {
		t.Fatalf("outcomes\n%v\nwant\n%v", got, want)
	}
	var reasons []string
	for {
		_, raw, ok := dlqQ.NextRaw()
		if !ok {
			break
		}
		var dl record.DeadLetter
		if err := json.Unmarshal(raw, &dl); err != nil || dl.Topic != names.In || dl.EventID == "" {
			t.Fatalf("DLQ record %s", raw)
		}
		reasons = append(reasons, dl.Key+"/"+dl.EventID+":"+string(dl.Reason))
	}
	slices.Sort(reasons)
	if want := []string{"o2/p2:orphan_ttl", "o3/q1:orphan_ttl", "o3/q2:orphan_ttl", "o3/q3:buffer_full"}; !slices.Equal(reasons, want) {
		t.Fatalf("DLQ %v, want %v", reasons, want)
	}
	for name, want := range map[string]float64{"stored": 4, "reconciled": 1, "expired": 3} {
		c := map[string]*prometheus.CounterVec{"stored": metrics.stored, "reconciled": metrics.reconciled, "expired": metrics.expired}[name]
		if got := testutil.ToFloat64(c.WithLabelValues(s.Name)); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}
