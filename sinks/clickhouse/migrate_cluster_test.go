package clickhouse_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/driftguard/driftguard/internal/config"
	sinkch "github.com/driftguard/driftguard/sinks/clickhouse"
)

// allStatements is what Migrate runs for c: the bootstrap, then every
// migration's statements.
func allStatements(t *testing.T, c config.ClickHouse) []string {
	t.Helper()
	stmts, err := sinkch.Bootstrap(c)
	if err != nil {
		t.Fatal(err)
	}
	migrations, err := sinkch.Migrations(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations {
		stmts = append(stmts, m.Statements...)
	}
	return stmts
}

// With clickhouse.cluster every CREATE, ALTER and DROP runs ON CLUSTER and
// every table is Replicated, keyed by {shard}, {replica} and its own name;
// taking those away gives back the one-server statement exactly, which
// in turn names no cluster and no Replicated engine.
func TestClusterRenderingReplicatesEveryTable(t *testing.T) {
	single := allStatements(t, config.ClickHouse{Database: "dg_c"})
	cluster := allStatements(t, config.ClickHouse{Database: "dg_c", Cluster: "analytics"})
	if len(cluster) != len(single) {
		t.Fatalf("%d statements for the cluster, %d for one server", len(cluster), len(single))
	}
	replicated := regexp.MustCompile(`ENGINE = Replicated(\w*MergeTree)\('/clickhouse/tables/\{shard\}/dg_c/(\w+)', '\{replica\}'(, )?`)
	tables := 0
	for i, stmt := range cluster {
		if strings.Contains(single[i], "ON CLUSTER") || strings.Contains(single[i], "Replicated") {
			t.Errorf("one-server statement names a cluster:\n%s", single[i])
		}
		if strings.HasPrefix(stmt, "INSERT") {
			if stmt != single[i] {
				t.Errorf("an INSERT changed for the cluster:\n%s", stmt)
			}
			continue
		}
		if strings.Count(stmt, "ON CLUSTER") != 1 || !strings.Contains(stmt, " ON CLUSTER analytics") {
			t.Errorf("not once ON CLUSTER:\n%s", stmt)
		}
		if strings.HasPrefix(stmt, "CREATE TABLE") {
			tables++
			m := replicated.FindStringSubmatch(stmt)
			if m == nil || !strings.Contains(stmt, "dg_c."+m[2]+" ON CLUSTER") {
				t.Errorf("a table not Replicated under its own name:\n%s", stmt)
			}
		}
		back := replicated.ReplaceAllString(strings.Replace(stmt, " ON CLUSTER analytics", "", 1), "ENGINE = $1(")
		if back != single[i] {
			t.Errorf("the cluster's statement differs from the one server's by more than ON CLUSTER and the engine:\n%s\nvs\n%s", stmt, single[i])
		}
	}
	// schema_migrations, events, entity_state, dlq, orphans,
	// ordering_minute, sink_positions, replay_requests.
	if tables != 8 {
		t.Errorf("%d CREATE TABLE statements, want 8", tables)
	}
}

// A statement the rendering does not know fails it, rather than leaving a
// table on one server of the cluster.
func TestClusterRenderingRefusesWhatItDoesNotKnow(t *testing.T) {
	for _, stmt := range []string{
		"CREATE TABLE IF NOT EXISTS db.t (x UInt8) ENGINE = Memory",
		"CREATE TABLE IF NOT EXISTS db.t (x UInt8) ENGINE = ReplicatedMergeTree('/p', 'r') ORDER BY x",
		"RENAME TABLE db.a TO db.b",
		"CREATE VIEW IF NOT EXISTS db.v AS SELECT 1",
	} {
		if got, err := sinkch.OnCluster(stmt, "analytics"); err == nil {
			t.Errorf("rendered %q as %q, want an error", stmt, got)
		}
	}
}
