package clickhouse_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/naming"
	"github.com/driftguard/driftguard/internal/record"
	"github.com/driftguard/driftguard/internal/testenv"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// On the real 18.16 server, which has no TTL: the months wholly older
// than a table's retention are dropped, the recent one and the tables
// without retention are kept; a dry run changes nothing, and a second run
// finds nothing to do.
func TestRetentionDropsOldMonthsOnServersWithoutTTL(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	conn, cfg := migratedDatabase(t, ctx)
	if ttl := serverHasTTL(t, ctx, conn); ttl {
		t.Skip("the server has TTL; this test is of the partition path (18.16)")
	}
	now := time.Now()
	old, older := time.Date(2020, 1, 15, 12, 0, 0, 0, time.UTC), time.Date(2020, 2, 28, 23, 0, 0, 0, time.UTC)
	// The month before this one ended less than 40 days ago: kept.
	lastMonth := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC).Add(-time.Hour)
	names := naming.Prefixes{}.For("presence")
	// The replay requests of the catalogue's gapless stream.
	replays := naming.Prefixes{}.For("workflow").Replay
	var recs []*kgo.Record
	for i, at := range []time.Time{old, older, lastMonth, now} {
		o := record.Outcome{Stream: "presence", Key: "alice", EventID: fmt.Sprint("e", i), Outcome: record.Applied,
			ProcessedAtMs: at.UnixMilli(), DecisionID: fmt.Sprint("presence/0/", i, "/0")}
		recs = append(recs, kafkaRecord(t, names.Outcomes, 0, int64(i), o))
		dl := record.DeadLetter{Stream: "presence", Topic: names.In, Offset: int64(i), Key: "alice", Reason: record.ReasonOrphanTTL, AtMs: at.UnixMilli()}
		recs = append(recs, kafkaRecord(t, names.DLQ, 0, int64(i), dl))
		rq := record.ReplayRequest{Stream: "workflow", Key: "op-1", FirstMissing: int64(i + 2), RequestedAtMs: at.UnixMilli()}
		recs = append(recs, kafkaRecord(t, replays, 0, int64(i), rq))
	}
	if err := quietSink(cfg, conn).Insert(ctx, recs); err != nil {
		t.Fatal(err)
	}
	db := cfg.ClickHouse.Database
	months := func(table, column string) []string {
		out := queryStrings(t, ctx, conn, fmt.Sprintf("SELECT toString(toYYYYMM(%s)) FROM %s.%s", column, db, table))
		slices.Sort(out)
		return out
	}
	before := map[string][]string{}
	for table := range cfg.ClickHouse.Retention.ByTable() {
		before[table] = months(table, retentionColumn(table))
	}
	for table, got := range before {
		if len(got) != 4 {
			t.Fatalf("%s holds the months %v, want 4 rows", table, got)
		}
	}

	cfg.ClickHouse.Retention.Events = 40 * 24 * time.Hour
	cfg.ClickHouse.Retention.Orphans = 40 * 24 * time.Hour
	cfg.ClickHouse.Retention.ReplayRequests = 40 * 24 * time.Hour
	dry, err := sinkch.ApplyRetention(ctx, conn, cfg.ClickHouse, now, true)
	if err != nil {
		t.Fatal(err)
	}
	var dropped []string
	for _, a := range dry {
		if a.What != "drop" || a.Rows != 1 || !strings.HasSuffix(a.Statement, "DROP PARTITION "+a.Partition) {
			t.Errorf("unexpected action %s", a)
		}
		dropped = append(dropped, a.Table+" "+a.Partition)
	}
	if want := []string{"events 202001", "events 202002", "orphans 202001", "orphans 202002", "replay_requests 202001", "replay_requests 202002"}; !slices.Equal(dropped, want) {
		t.Errorf("dry run would drop %q, want %q", dropped, want)
	}
	if got := months("events", "processed_at"); !slices.Equal(got, before["events"]) {
		t.Errorf("a dry run changed events: %v", got)
	}

	done, err := sinkch.ApplyRetention(ctx, conn, cfg.ClickHouse, now, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != len(dry) {
		t.Errorf("applied %d actions, the dry run said %d", len(done), len(dry))
	}
	for table, got := range before {
		want := got
		if table == "events" || table == "orphans" || table == "replay_requests" {
			want = got[2:]
		}
		if after := months(table, retentionColumn(table)); !slices.Equal(after, want) {
			t.Errorf("%s holds the months %v after retention, want %v", table, after, want)
		}
	}
	again, err := sinkch.ApplyRetention(ctx, conn, cfg.ClickHouse, now, false)
	if err != nil || len(again) > 0 {
		t.Errorf("second run: %v %v, want nothing to do", again, err)
	}
}

func retentionColumn(table string) string {
	return map[string]string{"events": "processed_at", "dlq": "dead_at", "orphans": "expired_at", "ordering_minute": "minute",
		"replay_requests": "requested_at"}[table]
}

func serverHasTTL(t *testing.T, ctx context.Context, conn driver.Conn) bool {
	t.Helper()
	var v string
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return sinkch.VersionAtLeast(v, [2]int{19, 6})
}

func TestVersionAtLeast(t *testing.T) {
	for v, want := range map[string]bool{"18.16.1": false, "19.5.3.8": false, "19.6.2.11": true, "19.10.1": true, "24.8.4.13": true, "26.9.0": true, "": false, "x.y": false} {
		if got := sinkch.VersionAtLeast(v, [2]int{19, 6}); got != want {
			t.Errorf("%q at least 19.6: %v, want %v", v, got, want)
		}
	}
}

// With clickhouse.retention.every, the sink applies the retention itself
// as it starts (then at that period): an old month of events goes, the
// sink's own rows stay.
func TestSinkAppliesTheRetentionOnItsSchedule(t *testing.T) {
	ctx := testenv.Context(t, time.Minute)
	b := newBrokerSink(t, ctx, "retained")
	if serverHasTTL(t, ctx, b.conn) {
		t.Skip("the server has TTL; this test is of the partition path (18.16)")
	}
	// Of another topic: its position does not make the sink skip any.
	batch, err := b.conn.PrepareBatch(ctx, "INSERT INTO "+b.cfg.ClickHouse.Database+".events (event_id, processed_at, `topic`)")
	if err != nil {
		t.Fatal(err)
	}
	if err := batch.Append("old", time.Date(2020, 1, 15, 0, 0, 0, 0, time.UTC), "elsewhere.outcomes"); err != nil {
		t.Fatal(err)
	}
	if err := batch.Send(); err != nil {
		t.Fatal(err)
	}
	if got := b.eventIDs(); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("events before the sink: %q", got)
	}
	b.cfg.ClickHouse.Retention.Events = 30 * 24 * time.Hour
	b.cfg.ClickHouse.Retention.Every = time.Hour
	b.produce(b.outcome("new"))
	b.run()
	testenv.WaitFor(t, ctx, "the old month dropped and the new event inserted", func() bool {
		return slices.Equal(b.eventIDs(), []string{"new"})
	})
}
