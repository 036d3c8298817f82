package processors

import (
	"testing"

	"github.com/lovoo/goka"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Under prefixes the runtime reads and writes the prefixed topics, keeps
// its table in the prefixed one and its group under the group prefix,
// however the two prefixes differ: the graph's group names the table, the
// runtime's option the consumer group.
func TestRuntimeUnderPrefixes(t *testing.T) {
	s := testenv.Shipped(t, "presence")
	tt, names := startRun(t, s, Options{Naming: naming.Prefixes{TopicPrefix: "team-a.", GroupPrefix: "g-a."}})
	if names.In != "team-a.presence.in" || names.Outcomes != "team-a.presence.outcomes" || names.Table != "team-a.presence-table" {
		t.Fatalf("topics %+v, want them under team-a.", names)
	}
	if group, want := tt.r.proc.Group(), (naming.Prefixes{GroupPrefix: "g-a."}).Group("presence"); group != want {
		t.Fatalf("consumer group %q, want it under g-a.", group)
	}
	outQ := tt.NewQueueTracker(names.Outcomes)
	tt.Consume(names.In, "alice", testenv.Presence{EventID: "e1", User: "alice", Version: 1}.Body(),
		withHeaders(goka.Headers{record.HeaderReceivedAt: []byte("1700000000123")}))
	if got := outcomes(t, outQ); len(got) != 1 || got[0].Outcome != record.Applied {
		t.Fatalf("outcomes %+v, want one applied", got)
	}
	if e, ok := tt.TableValue(goka.Table("team-a.presence-table"), "alice").(*tableValue); !ok || e.Version != 1 {
		t.Errorf("table value %+v in team-a.presence-table, want version 1", e)
	}
}
