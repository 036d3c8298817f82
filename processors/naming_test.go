package processors

import (
	"strings"
	"testing"

	"github.com/lovoo/goka"
	"github.com/lovoo/goka/tester"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
)

// Under equal prefixes goka's processor reads and writes the prefixed
// topics and keeps its table in the prefixed one; under different ones it
// refuses to start, since goka would name the table after the group.
func TestGokaProcessorUnderPrefixes(t *testing.T) {
	s := testenv.Shipped(t, "presence")
	tt, _, names := startTester(t, s, Options{Naming: naming.Prefixes{TopicPrefix: "team-a.", GroupPrefix: "team-a."}})
	if names.In != "team-a.presence.in" || names.Outcomes != "team-a.presence.outcomes" {
		t.Fatalf("topics %+v, want them under team-a.", names)
	}
	outQ := tt.NewQueueTracker(names.Outcomes)
	tt.Consume(names.In, "alice", testenv.Presence{EventID: "e1", User: "alice", Version: 1}.Body(),
		tester.WithHeaders(goka.Headers{record.HeaderReceivedAt: []byte("1700000000123")}))
	if got := outcomes(t, outQ); len(got) != 1 || got[0].Outcome != record.Applied {
		t.Fatalf("outcomes %+v, want one applied", got)
	}
	if e, ok := tt.TableValue(goka.Table("team-a.presence-table"), "alice").(*tableValue); !ok || e.Version != 1 {
		t.Errorf("table value %+v in team-a.presence-table, want version 1", e)
	}

	_, err := New(nil, s, Options{Naming: naming.Prefixes{TopicPrefix: "t.", GroupPrefix: "g."}}, goka.WithTester(tester.New(t)))
	if err == nil || !strings.Contains(err.Error(), "kafka.topic_prefix equal to kafka.group_prefix") {
		t.Errorf("New with different prefixes: %v, want a refusal naming both settings", err)
	}
}
