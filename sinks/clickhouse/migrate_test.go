package clickhouse_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/driftguard/driftguard/internal/config"
	"github.com/driftguard/driftguard/internal/testenv"
	"github.com/driftguard/driftguard/schemas"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

func TestMigrationsParseEmbeddedFilesInVersionOrder(t *testing.T) {
	const db = "dg_parse"
	migrations, err := sinkch.Migrations(config.ClickHouse{Database: db})
	if err != nil {
		t.Fatal(err)
	}
	files, err := fs.Glob(schemas.ClickHouse, "clickhouse/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	if len(migrations) == 0 || len(migrations) != len(files) {
		t.Fatalf("%d migrations from %d embedded files", len(migrations), len(files))
	}
	for i, m := range migrations {
		if i > 0 && m.Version <= migrations[i-1].Version {
			t.Errorf("migration %d (%s) after %d: versions must increase", m.Version, m.Name, migrations[i-1].Version)
		}
		if m.Version < 1 || m.Name == "" || len(m.Statements) == 0 {
			t.Errorf("migration %+v: want a positive version, a name and statements", m)
		}
		for _, stmt := range m.Statements {
			// Comments are dropped and each statement stands alone: the
			// native protocol takes one statement per query.
			if strings.HasPrefix(stmt, "--") || strings.HasSuffix(stmt, ";") || strings.Contains(stmt, ";\n") {
				t.Errorf("migration %d: statement not split cleanly:\n%s", m.Version, stmt)
			}
			if strings.Contains(stmt, "{database}") || !strings.Contains(stmt, db+".") {
				t.Errorf("migration %d: database not substituted:\n%s", m.Version, stmt)
			}
			// Rerunning a migration half applied before must not fail.
			if strings.HasPrefix(stmt, "CREATE") && !strings.Contains(stmt, "IF NOT EXISTS") {
				t.Errorf("migration %d: CREATE without IF NOT EXISTS:\n%s", m.Version, stmt)
			}
		}
	}
	if first := migrations[0]; first.Version != 1 || first.Name != "events_and_state" || len(first.Statements) != 2 {
		t.Errorf("first migration %d_%s with %d statements, want 1_events_and_state with 2", first.Version, first.Name, len(first.Statements))
	}
}

// openTestDatabase opens the real server and returns a connection and a
// fresh database name, dropped when the test ends.
func openTestDatabase(t testing.TB) (driver.Conn, config.ClickHouse) {
	t.Helper()
	addr := testenv.ClickHouse(t)
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	c := cfg.ClickHouse
	c.Addr = addr
	return openDatabase(t, c)
}

// openDatabase connects with c, and names a fresh database in c that is
// dropped when the test ends.
func openDatabase(t testing.TB, c config.ClickHouse) (driver.Conn, config.ClickHouse) {
	t.Helper()
	c.Database = testenv.UniqueName("dg_test")
	conn, err := sinkch.Open(testenv.Context(t, time.Minute), c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+c.Database); err != nil {
			t.Errorf("dropping %s: %v", c.Database, err)
		}
		conn.Close()
	})
	return conn, c
}

// Columns of design §6 that queries may rely on, with the types the
// migrations give them (portable to ClickHouse 18.16).
var contractColumns = map[string]map[string]string{
	"events": {
		"stream": "String", "entity_key": "String", "event_id": "String", "event_type": "String",
		"version": "Int64", "outcome": "String", "reason": "String", "gap": "Int64",
		"occurred_at_ms": "Int64", "received_at_ms": "Int64", "processed_at_ms": "Int64",
		"topic": "String", "partition": "Int32", "offset": "Int64", "payload": "String",
		"decision_id": "String", "action": "String", "requested_by": "String",
	},
	"entity_state": {
		"stream": "String", "entity_key": "String", "version": "UInt64", "state": "String",
		"updated_at_ms": "Int64", "expires_at_ms": "Int64",
	},
	"ordering_minute": {"stream": "String", "minute": "DateTime", "outcome": "String", "events": "UInt64"},
}

func TestMigrateCreatesTablesOnceAndIsIdempotent(t *testing.T) {
	conn, c := openTestDatabase(t)
	ctx := testenv.Context(t, time.Minute)
	all, err := sinkch.Migrations(c)
	if err != nil {
		t.Fatal(err)
	}

	applied, err := sinkch.Migrate(ctx, conn, c, nil)
	if err != nil {
		t.Fatalf("first Migrate: %v", err)
	}
	if len(applied) != len(all) {
		t.Errorf("first Migrate applied %d migrations, want all %d", len(applied), len(all))
	}
	for i := range min(len(applied), len(all)) {
		if applied[i].Version != all[i].Version {
			t.Errorf("applied[%d] is version %d, want %d (version order)", i, applied[i].Version, all[i].Version)
		}
	}

	again, err := sinkch.Migrate(ctx, conn, c, nil)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if len(again) != 0 {
		t.Errorf("second Migrate applied %+v, want nothing", again)
	}

	var recorded uint64
	if err := conn.QueryRow(ctx, "SELECT count() FROM "+c.Database+".schema_migrations").Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if int(recorded) != len(all) {
		t.Errorf("schema_migrations has %d rows, want one per migration (%d)", recorded, len(all))
	}

	for table, want := range contractColumns {
		got := columns(t, ctx, conn, c.Database, table)
		if len(got) == 0 {
			t.Errorf("table %s.%s has no columns: not created", c.Database, table)
			continue
		}
		for name, typ := range want {
			if got[name] != typ {
				t.Errorf("%s.%s has type %q, want %q", table, name, got[name], typ)
			}
		}
	}

	// entity_state keeps the highest version per key only through its engine.
	var engine string
	if err := conn.QueryRow(ctx, "SELECT engine FROM system.tables WHERE database = ? AND name = 'entity_state'", c.Database).Scan(&engine); err != nil {
		t.Fatal(err)
	}
	if engine != "ReplacingMergeTree" {
		t.Errorf("entity_state engine %s, want ReplacingMergeTree", engine)
	}
}

// Two sink replicas start at once and both migrate: both must succeed.
func TestMigrateConcurrentlyConverges(t *testing.T) {
	conn, c := openTestDatabase(t)
	ctx := testenv.Context(t, time.Minute)
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := sinkch.Migrate(ctx, conn, c, nil)
			errs <- err
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Migrate: %v", err)
		}
	}
	for table := range contractColumns {
		if len(columns(t, ctx, conn, c.Database, table)) == 0 {
			t.Errorf("table %s not created", table)
		}
	}
	if again, err := sinkch.Migrate(ctx, conn, c, nil); err != nil || len(again) != 0 {
		t.Errorf("Migrate after the race = %+v, %v; want nothing to do", again, err)
	}
}

// A migration interrupted after its statements and before it was recorded
// runs again whole: every statement, the ADD COLUMNs included, must take
// its own effects as done.
func TestMigrationsRunAgainAfterAnInterruption(t *testing.T) {
	conn, c := openTestDatabase(t)
	ctx := testenv.Context(t, time.Minute)
	all, err := sinkch.Migrate(ctx, conn, c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "DROP TABLE "+c.Database+".schema_migrations"); err != nil {
		t.Fatal(err)
	}
	again, err := sinkch.Migrate(ctx, conn, c, nil)
	if err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	if len(again) != len(all) {
		t.Errorf("Migrate again applied %d migrations, want all %d", len(again), len(all))
	}
	if got := columns(t, ctx, conn, c.Database, "events")["decision_id"]; got != "String" {
		t.Errorf("events.decision_id is %q after the rerun", got)
	}
}

// columns returns name → type of a table's columns.
func columns(t *testing.T, ctx context.Context, conn driver.Conn, database, table string) map[string]string {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT name, type FROM system.columns WHERE database = ? AND table = ?", database, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			t.Fatal(err)
		}
		out[name] = typ
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// migratedDatabase is openTestDatabase, migrated, with the default config
// pointing at it.
func migratedDatabase(t testing.TB, ctx context.Context) (driver.Conn, *config.Config) {
	t.Helper()
	conn, c := openTestDatabase(t)
	return conn, migrated(t, ctx, conn, c)
}

// migrated migrates c's database through conn and returns the default
// config pointing at it.
func migrated(t testing.TB, ctx context.Context, conn driver.Conn, c config.ClickHouse) *config.Config {
	t.Helper()
	if _, err := sinkch.Migrate(ctx, conn, c, nil); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Default()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClickHouse = c
	return cfg
}

// quietSink is a sink of cfg writing through conn, logging nothing.
func quietSink(cfg *config.Config, conn driver.Conn) *sinkch.Sink {
	return sinkch.New(sinkch.Options{Config: cfg, Conn: conn})
}

// migrateBelow creates the database and runs every migration below
// version, as an older release left it, and returns the migrations.
func migrateBelow(t testing.TB, ctx context.Context, conn driver.Conn, database string, version int) []sinkch.Migration {
	t.Helper()
	migrations, err := sinkch.Migrations(config.ClickHouse{Database: database})
	if err != nil {
		t.Fatal(err)
	}
	if err := conn.Exec(ctx, "CREATE DATABASE IF NOT EXISTS "+database); err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations {
		if m.Version >= version {
			break
		}
		for _, stmt := range m.Statements {
			if err := conn.Exec(ctx, stmt); err != nil {
				t.Fatalf("migration %d: %v\n%s", m.Version, err, stmt)
			}
		}
	}
	return migrations
}

// withFakeBroker points cfg at a fresh embedded broker (so the sink's fixed
// consumer group starts with no offsets), with the streams' topics created,
// and returns a client for producing.
func withFakeBroker(t *testing.T, ctx context.Context, cfg *config.Config) *kgo.Client {
	t.Helper()
	cfg.Kafka.Brokers = testenv.Fake(t)
	cfg.ClickHouse.BatchPeriod = 50 * time.Millisecond
	cl := testenv.Topics(t, ctx, cfg, cfg.Kafka.Brokers)
	t.Cleanup(cl.Close)
	return cl
}
