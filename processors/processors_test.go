package processors

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/topics"
)

// runTester starts the presence processor on goka's tester.
func runTester(t *testing.T) (*tester.Tester, topics.Names) {
	tt, _, names := startTester(t, presence(t), Options{})
	return tt, names
}

// startTester runs the processor of s on goka's tester until the test ends.
func startTester(t *testing.T, s *config.Stream, opts Options) (*tester.Tester, *Processor, topics.Names) {
	t.Helper()
	tt := tester.New(t)
	proc, err := New(nil, s, opts, goka.WithTester(tt))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("processor: %v", err)
		}
	})
	return tt, proc, topics.For(s.Name)
}

func outcomes(t *testing.T, qt *tester.QueueTracker) []envelope.Outcome {
	return records[envelope.Outcome](t, qt)
}

// records decodes every record left on qt.
func records[T any](t *testing.T, qt *tester.QueueTracker) []T {
	t.Helper()
	var out []T
	for _, raw := range rawRecords(qt) {
		var v T
		if err := json.Unmarshal(raw, &v); err != nil {
			t.Fatalf("record %s: %v", raw, err)
		}
		out = append(out, v)
	}
	return out
}

func TestProcessorPresenceOutcomesAndState(t *testing.T) {
	tt, names := runTester(t)
	outQ := tt.NewQueueTracker(names.Outcomes)
	stateQ := tt.NewQueueTracker(names.State)
	headers := goka.Headers{envelope.HeaderReceivedAt: []byte("1700000000123")}
	deliveries := []struct {
		id      string
		version int64
		want    string
	}{
		{"e1", 841, envelope.OutcomeApplied},
		{"e3", 843, envelope.OutcomeApplied},
		{"e2", 842, envelope.OutcomeStale},
		{"e3b", 843, envelope.OutcomeStale},
		{"e3", 843, envelope.OutcomeDuplicate},
		{"e4", 844, envelope.OutcomeApplied},
	}
	for _, d := range deliveries {
		tt.Consume(names.In, "alice", presenceBody(d.id, "alice", d.version, "ONLINE"), tester.WithHeaders(headers))
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
	states := records[envelope.State](t, stateQ)
	// timestamp 1700000000 plus the shipped presence TTL of 5 minutes.
	if len(states) == 3 && states[2].ExpiresAtMs != 1_700_000_300_000 {
		t.Errorf("state expires_at_ms %d, want timestamp + ttl", states[2].ExpiresAtMs)
	}
	if len(states) != 3 || states[2].Version != 844 {
		t.Fatalf("state records %+v, want 3 ending at 844", states)
	}
	e := tt.TableValue(goka.GroupTable(goka.Group("presence")), "alice").(*Entity)
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
	tt.Consume(names.In, "mallory", presenceBody("y", "bob", 1, "ONLINE"))
	tt.Consume(names.In, "bob", presenceBody("z", "bob", 1, "ONLINE"))

	var reasons []string
	for {
		_, raw, ok := dlq.NextRaw()
		if !ok {
			break
		}
		var dl envelope.DeadLetter
		if err := json.Unmarshal(raw, &dl); err != nil {
			t.Fatal(err)
		}
		reasons = append(reasons, dl.Reason)
	}
	want := []string{"undecodable", "undecodable", "key_mismatch"}
	if len(reasons) != len(want) {
		t.Fatalf("DLQ reasons %v, want %v", reasons, want)
	}
	for i := range want {
		if reasons[i] != want[i] {
			t.Fatalf("DLQ reasons %v, want %v", reasons, want)
		}
	}
	got := outcomes(t, outQ)
	if len(got) != 1 || got[0].Outcome != envelope.OutcomeApplied || got[0].EventID != "z" {
		t.Fatalf("after poison the partition must keep flowing; outcomes %+v", got)
	}
}
