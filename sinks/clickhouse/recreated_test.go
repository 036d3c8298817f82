package clickhouse_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/driftguard/driftguard/internal/kafka"
	"github.com/driftguard/driftguard/internal/testenv"
)

// A topic deleted and created again starts its offsets at 0 under a new
// topic id. Whether the sink reads on through it or starts after it, the
// new topic's records land (the positions of the old id no longer apply),
// the recreation is counted once, and each row carries the id of the topic
// it was read from. On the real broker.
func TestRecreatedTopicIsReadFromItsStart(t *testing.T) {
	ctx := testenv.Context(t, 3*time.Minute)
	b := newBrokerSink(t, ctx, "recreated")
	adm := kadm.NewClient(b.cl)
	recreate := func(topic string) {
		t.Helper()
		if _, err := adm.DeleteTopic(ctx, topic); err != nil {
			t.Fatal(err)
		}
		testenv.WaitFor(t, ctx, topic+" deleted", func() bool {
			listed, err := adm.ListTopics(ctx, topic)
			return err == nil && !listed.Has(topic)
		})
		if _, err := kafka.EnsureTopics(ctx, b.cl, b.cfg, true); err != nil {
			t.Fatal(err)
		}
		// The producer, like every franz-go client, keeps the old id.
		b.cl.PurgeTopicsFromClient(topic)
	}
	recreatedCount := func(topic string) float64 {
		families, err := b.ops.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range families {
			for _, m := range f.GetMetric() {
				if f.GetName() == "driftguard_sink_topic_recreated_total" && m.GetLabel()[0].GetValue() == topic {
					return m.GetCounter().GetValue()
				}
			}
		}
		t.Fatalf("no driftguard_sink_topic_recreated_total of %s", topic)
		return 0
	}
	ids := func() []string {
		return b.strings("SELECT topic_id FROM " + b.cfg.ClickHouse.Database + ".events ORDER BY processed_at_ms, `offset`")
	}

	stop := b.run()
	for i := range 5 {
		b.produce(b.outcome(fmt.Sprintf("e%d", i)))
	}
	b.waitForEvents(5)

	// Read on through the recreation.
	recreate(b.names.Outcomes)
	b.produce(b.outcome("n0"), b.outcome("n1"))
	b.waitForEvents(7)
	if got := recreatedCount(b.names.Outcomes); got != 1 {
		t.Errorf("recreations counted %v, want 1", got)
	}
	got := ids()
	if got[0] == "" || got[0] != got[4] || got[5] == got[0] || got[5] != got[6] || got[5] == "" {
		t.Errorf("topic ids of the rows %q: want one id for the first topic's five, another for the new one's two", got)
	}

	// Restarted, the sink finds positions of both ids and counts nothing.
	stop()
	stop = b.run()
	b.produce(b.outcome("n2"))
	b.waitForEvents(8)
	if got := recreatedCount(b.names.Outcomes); got != 0 {
		t.Errorf("recreations counted %v after a restart, want 0", got)
	}

	// Recreated while no sink runs: found when it starts.
	stop()
	recreate(b.names.Outcomes)
	b.produce(b.outcome("m0"))
	b.run()
	b.waitForEvents(9)
	if got := recreatedCount(b.names.Outcomes); got != 1 {
		t.Errorf("recreations counted %v by a sink started after one, want 1", got)
	}
	time.Sleep(4 * b.cfg.ClickHouse.BatchPeriod) // a doubled row would show by now
	want := []string{"e0", "e1", "e2", "e3", "e4", "n0", "n1", "n2", "m0"}
	if got := b.strings("SELECT event_id FROM " + b.cfg.ClickHouse.Database + ".events ORDER BY processed_at_ms"); !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
}
