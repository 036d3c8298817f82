package decide

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/envelope"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

func latestEvent(id string, version int64) Event {
	return Event{
		Fields: envelope.Fields{Key: "u", EventID: id, Version: version, HasVersion: true},
		Body:   json.RawMessage(fmt.Sprintf(`{"v":%d,"id":%q}`, version, id)),
	}
}

// The seed scenario: 841, 843, 842, 843 (new id), 843 (same id), 844.
func TestLatestSeedScenario(t *testing.T) {
	var e Entity
	steps := []struct {
		id      string
		version int64
		want    record.Result
		gap     int64
	}{
		{"a", 841, record.Applied, 0},
		{"b", 843, record.Applied, 1},
		{"c", 842, record.Stale, 0},
		{"d", 843, record.Stale, 0},
		{"b", 843, record.Duplicate, 0},
		{"e", 844, record.Applied, 0},
	}
	for i, s := range steps {
		d := decideLatest(&e, latestEvent(s.id, s.version), 16)
		if d.Outcome != s.want || d.Gap != s.gap {
			t.Fatalf("step %d (%s@%d): got %s gap %d, want %s gap %d", i, s.id, s.version, d.Outcome, d.Gap, s.want, s.gap)
		}
	}
	if e.Version != 844 || string(e.State) != `{"v":844,"id":"e"}` {
		t.Fatalf("final entity: version %d state %s", e.Version, e.State)
	}
}

func TestLatestWithoutVersionAppliesInLogOrder(t *testing.T) {
	var e Entity
	for i, id := range []string{"x", "y", "x", "z"} {
		d := decideLatest(&e, Event{Fields: envelope.Fields{EventID: id}, Body: json.RawMessage(`{}`)}, 16)
		want := record.Applied
		if i == 2 {
			want = record.Duplicate
		}
		if d.Outcome != want {
			t.Fatalf("event %d (%s): %s, want %s", i, id, d.Outcome, want)
		}
	}
	if e.Version != 3 {
		t.Fatalf("version %d, want 3", e.Version)
	}
}

func TestLatestDedupMemoryIsBounded(t *testing.T) {
	var e Entity
	for v := int64(1); v <= 100; v++ {
		decideLatest(&e, latestEvent(fmt.Sprint(v), v), 8)
	}
	if len(e.Recent) != 8 || e.Recent[0].Hash != idHash("93") || !e.Remembers("100") || e.Remembers("92") {
		t.Fatalf("recent ids %v, want the last 8", e.Recent)
	}
}

// Any permutation and duplication of a version history ends in the state of
// the clean ordered replay, and every event id applies at most once.
func TestLatestConvergesUnderReorderAndDuplication(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(t, "versions")
		start := rapid.Int64Range(0, 1_000_000).Draw(t, "start")
		var history []Event
		for i := range n {
			v := start + int64(i)*rapid.Int64Range(1, 3).Draw(t, "step")
			if i > 0 {
				v = max(v, history[i-1].Version+1)
			}
			history = append(history, latestEvent(fmt.Sprintf("e%d", i), v))
		}
		var clean Entity
		for _, ev := range history {
			decideLatest(&clean, ev, 1024)
		}
		// Deliveries: each event at least once, some several times, shuffled.
		var deliveries []Event
		for _, ev := range history {
			copies := rapid.IntRange(1, 3).Draw(t, "copies")
			for range copies {
				deliveries = append(deliveries, ev)
			}
		}
		perm := rapid.Permutation(deliveries).Draw(t, "order")
		var got Entity
		applied := map[string]int{}
		for _, ev := range perm {
			if d := decideLatest(&got, ev, 1024); d.Applied() {
				applied[ev.EventID]++
			}
		}
		if got.Version != clean.Version || string(got.State) != string(clean.State) {
			t.Fatalf("final version %d state %s; ordered replay gives %d %s", got.Version, got.State, clean.Version, clean.State)
		}
		for id, times := range applied {
			if times > 1 {
				t.Fatalf("event %s applied %d times", id, times)
			}
		}
	})
}

// decideLatest is the latest policy's single decision on ev.
func decideLatest(e *Entity, ev Event, dedupIDs int) Decision {
	return latest{dedup: dedup{ids: dedupIDs, windowMs: week}}.decide(e, ev).Decisions[0]
}

// The third clock: the source's expires_at, else the stream's TTL after the
// source clock, else after received_at; readers show unknown after it.
func TestLatestExpiresAt(t *testing.T) {
	p := latest{dedup: dedup{ids: 8, windowMs: week}, ttl: 5 * time.Minute}
	cases := []struct {
		name string
		ev   Event
		want int64
	}{
		{"from the payload", Event{Fields: envelope.Fields{EventID: "a", Version: 1, HasVersion: true, OccurredAtMs: 1_000, ExpiresAtMs: 9_000}}, 9_000},
		{"ttl after occurred_at", Event{Fields: envelope.Fields{EventID: "b", Version: 2, HasVersion: true, OccurredAtMs: 1_000}}, 301_000},
		{"ttl after received_at", Event{Fields: envelope.Fields{EventID: "c", Version: 3, HasVersion: true}, ReceivedAtMs: 2_000}, 302_000},
	}
	var e Entity
	for _, tc := range cases {
		p.decide(&e, tc.ev)
		if e.ExpiresAtMs != tc.want {
			t.Errorf("%s: expires_at_ms %d, want %d", tc.name, e.ExpiresAtMs, tc.want)
		}
	}
	never := latest{dedup: dedup{ids: 8, windowMs: week}}
	var f Entity
	never.decide(&f, Event{Fields: envelope.Fields{EventID: "d", Version: 1, HasVersion: true, OccurredAtMs: 1_000}})
	if f.ExpiresAtMs != 0 {
		t.Errorf("without a TTL the claim expired at %d", f.ExpiresAtMs)
	}
}

// A latest stream with terminal states: once a terminal event applies,
// every new event is rejected with reason terminal, a lower version
// included, while a redelivery stays a duplicate; and a stream without a
// version behaves alike.
func TestLatestTerminal(t *testing.T) {
	for _, versioned := range []bool{true, false} {
		s := testenv.Shipped(t, "workflow")
		s.Policy, s.Limits.Buffer = config.PolicyLatest, 0
		if !versioned {
			s.Version = ""
		}
		p := For(s)
		at := func(id string, seq int64, status string) Event {
			return read(t, p, fmt.Appendf(nil, `{"event_id":%q,"operation_id":"op","sequence":%d,"status":%q,"occurred_at":"2026-01-01T00:00:00Z"}`, id, seq, status), 0)
		}
		var e Entity
		steps := []struct {
			ev   Event
			want decided
		}{
			{at("a", 1, "running"), decided{"a", record.Applied, ""}},
			{at("b", 3, "completed"), decided{"b", record.Applied, ""}},
			{at("c", 4, "running"), decided{"c", record.Rejected, record.ReasonTerminal}},
			{at("d", 2, "running"), decided{"d", record.Rejected, record.ReasonTerminal}},
			{at("b", 3, "completed"), decided{"b", record.Duplicate, ""}},
			{at("e", 5, "completed"), decided{"e", record.Rejected, record.ReasonTerminal}},
		}
		for i, st := range steps {
			if got := summary(p.Decide(&e, st.ev)); len(got) != 1 || got[0] != st.want {
				t.Fatalf("versioned %v, step %d: %+v, want %+v", versioned, i, got, st.want)
			}
		}
		var body struct{ Status string }
		if err := json.Unmarshal(e.State, &body); err != nil || body.Status != "completed" || !e.Terminal {
			t.Fatalf("versioned %v: state %s terminal %v", versioned, e.State, e.Terminal)
		}
	}
}
