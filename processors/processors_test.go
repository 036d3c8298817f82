package processors

import (
	"encoding/json"
	"testing"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// runTester starts the presence processor.
func runTester(t *testing.T) (*shipped, naming.Topics) {
	return startRun(t, testenv.Shipped(t, "presence"), Options{})
}

func TestProcessorPresenceOutcomesAndState(t *testing.T) {
	tt, names := runTester(t)
	outQ := tt.NewQueueTracker(names.Outcomes)
	stateQ := tt.NewQueueTracker(names.State)
	headers := goka.Headers{record.HeaderReceivedAt: []byte("1700000000123")}
	deliveries := []struct {
		id      string
		version int64
		want    record.Result
	}{
		{"e1", 841, record.Applied},
		{"e3", 843, record.Applied},
		{"e2", 842, record.Stale},
		{"e3b", 843, record.Stale},
		{"e3", 843, record.Duplicate},
		{"e4", 844, record.Applied},
	}
	for _, d := range deliveries {
		tt.Consume(names.In, "alice", testenv.Presence{EventID: d.id, User: "alice", Version: d.version}.Body(), withHeaders(headers))
	}
	got := outcomes(t, outQ)
	if len(got) != len(deliveries) {
		t.Fatalf("%d outcomes for %d deliveries", len(got), len(deliveries))
	}
	for i, d := range deliveries {
		o := got[i]
		if o.Outcome != d.want || o.EventID != d.id || o.Version != d.version || o.Key != "alice" || o.Stream != "presence" {
			t.Errorf("delivery %d: outcome %+v, want %s for %s@%d", i, o, d.want, d.id, d.version)
		}
		if o.ReceivedAtMs != 1700000000123 || o.OccurredAtMs != 1700000000000 || o.InputOffset != int64(i) {
			t.Errorf("delivery %d: clocks or position wrong: %+v", i, o)
		}
	}
	if got[1].Gap != 1 {
		t.Errorf("843 after 841 should record a gap of 1, got %d", got[1].Gap)
	}
	// One state record per applied change, the last one for 844.
	states := records[record.State](t, stateQ)
	// timestamp 1700000000 plus the shipped presence TTL of 5 minutes.
	if len(states) == 3 && states[2].ExpiresAtMs != 1_700_000_300_000 {
		t.Errorf("state expires_at_ms %d, want timestamp + ttl", states[2].ExpiresAtMs)
	}
	if len(states) != 3 || states[2].Version != 844 {
		t.Fatalf("state records %+v, want 3 ending at 844", states)
	}
	e := tt.TableValue(goka.GroupTable(goka.Group("presence")), "alice").(*tableValue)
	if e.Version != 844 || len(e.Recent) != 5 {
		t.Fatalf("table value %+v", e)
	}
}

func TestProcessorSendsPoisonToDLQAndKeepsGoing(t *testing.T) {
	tt, names := runTester(t)
	dlq := tt.NewQueueTracker(names.DLQ)
	outQ := tt.NewQueueTracker(names.Outcomes)
	tt.Consume(names.In, "bob", []byte("not json"))
	tt.Consume(names.In, "bob", []byte(`{"event_id":"x","presence":"ONLINE","sequence_number":1,"timestamp":1}`))
	tt.Consume(names.In, "mallory", testenv.Presence{EventID: "y", User: "bob", Version: 1}.Body())
	tt.Consume(names.In, "bob", testenv.Presence{EventID: "z", User: "bob", Version: 1}.Body())

	var reasons []record.Reason
	for {
		_, raw, ok := dlq.NextRaw()
		if !ok {
			break
		}
		var dl record.DeadLetter
		if err := json.Unmarshal(raw, &dl); err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, dl.Reason)
	}
	want := []record.Reason{"undecodable", "undecodable", "key_mismatch"}
	if len(reasons) != len(want) {
		t.Fatalf("DLQ reasons %v, want %v", reasons, want)
	}
	for i := range want {
		if reasons[i] != want[i] {
			t.Fatalf("DLQ reasons %v, want %v", reasons, want)
		}
	}
	got := outcomes(t, outQ)
	if len(got) != 1 || got[0].Outcome != record.Applied || got[0].EventID != "z" {
		t.Fatalf("after poison the partition must keep flowing; outcomes %+v", got)
	}
}
