package clickhouse_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// A rebuild refuses while a sink consumes (it would go on skipping by
// positions removed under it), and changes nothing then; with the sinks
// stopped it empties the tables, and the next sink refills them from the
// topics' start, each row once. On the real broker and server.
func TestRebuildRefusesWhileASinkRunsThenRefillsOnce(t *testing.T) {
	ctx := testenv.Context(t, 2*time.Minute)
	b := newBrokerSink(t, ctx, "rebuild")
	want := []string{"e0", "e1", "e2"}
	for _, id := range want {
		b.produce(b.outcome(id))
	}
	stop := b.run()
	testenv.WaitFor(t, ctx, "the events inserted", func() bool { return slices.Equal(b.eventIDs(), want) })

	rebuilder := sinkch.New(sinkch.Options{Config: b.cfg, Conn: b.conn})
	if _, err := rebuilder.Rebuild(ctx); !errors.Is(err, sinkch.ErrSinksRunning) {
		t.Fatalf("rebuild with a sink running: %v, want ErrSinksRunning", err)
	}
	if got := b.eventIDs(); !slices.Equal(got, want) {
		t.Fatalf("a refused rebuild changed events: %q", got)
	}
	stop()
	plan, err := rebuilder.Rebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	emptied := map[string]uint64{}
	for _, tr := range plan.Tables {
		emptied[tr.Table] = tr.Rows
	}
	if emptied["events"] != 3 || emptied["sink_positions"] == 0 || plan.Tables[0].Table != "sink_positions" {
		t.Errorf("rebuild plan %+v: want sink_positions first, and events' 3 rows", plan)
	}
	// Every table the migrations make holds rows the sink wrote, or a view
	// wrote from them, so every one is emptied: a table kept would be
	// filled again on top of its rows, its positions gone.
	tables := b.strings(fmt.Sprintf("SELECT name FROM system.tables WHERE database = '%s' AND engine NOT LIKE '%%View' AND name != 'schema_migrations' ORDER BY name",
		b.cfg.ClickHouse.Database))
	if got := slices.Sorted(maps.Keys(emptied)); !slices.Equal(got, tables) || !slices.Contains(got, "replay_requests") {
		t.Errorf("rebuild empties %q, want every table of the database: %q", got, tables)
	}
	if got := b.eventIDs(); len(got) != 0 {
		t.Fatalf("events after the rebuild: %q, want none", got)
	}
	b.run()
	testenv.WaitFor(t, ctx, "the events inserted again", func() bool { return slices.Equal(b.eventIDs(), want) })
	b.produce(b.outcome("e3"))
	testenv.WaitFor(t, ctx, "a new event after them", func() bool { return slices.Equal(b.eventIDs(), append(want, "e3")) })
	if n := b.strings(fmt.Sprintf("SELECT toString(count() - uniqExact(decision_id)) FROM %s.events", b.cfg.ClickHouse.Database)); n[0] != "0" {
		t.Errorf("%s doubled rows after the rebuild", n[0])
	}
}
