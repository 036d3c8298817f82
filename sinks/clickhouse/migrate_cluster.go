package clickhouse

import (
	"fmt"
	"regexp"
	"strings"
)

// The statements the migrations are made of, as onCluster knows them. A
// statement of any other shape fails the rendering for a cluster, so a new
// migration cannot leave a table unreplicated or a view on one server.
var (
	createTableStmt = regexp.MustCompile(`^CREATE TABLE IF NOT EXISTS (\w+)\.(\w+) `)
	mergeTreeEngine = regexp.MustCompile(`ENGINE = (\w*MergeTree)\(([^)]*)\)`)
	clusterDDLStmt  = regexp.MustCompile(`^(CREATE DATABASE IF NOT EXISTS \w+|CREATE MATERIALIZED VIEW IF NOT EXISTS \w+\.\w+|ALTER TABLE \w+\.\w+|DROP TABLE IF EXISTS \w+\.\w+)`)
)

// onCluster renders one migration statement for clickhouse.cluster: DDL
// runs ON CLUSTER, so every server of the cluster gets the table or view;
// a table's MergeTree engine becomes its Replicated twin, keyed in
// ZooKeeper (or ClickHouse Keeper) by the servers' {shard} and {replica}
// macros and the table's name, so the replicas of a shard hold the same
// rows. An INSERT (the backfills) runs as it is, on the server migrate is
// connected to: its table replicates it to the other replicas.
func onCluster(stmt, cluster string) (string, error) {
	if strings.HasPrefix(stmt, "INSERT INTO ") {
		return stmt, nil
	}
	on := " ON CLUSTER " + cluster
	if m := createTableStmt.FindStringSubmatchIndex(stmt); m != nil {
		database, table := stmt[m[2]:m[3]], stmt[m[4]:m[5]]
		e := mergeTreeEngine.FindStringSubmatchIndex(stmt)
		if e == nil || strings.HasPrefix(stmt[e[2]:e[3]], "Replicated") {
			return "", fmt.Errorf("CREATE TABLE %s.%s: only a plain *MergeTree engine can be made Replicated for clickhouse.cluster", database, table)
		}
		args := fmt.Sprintf("'/clickhouse/tables/{shard}/%s/%s', '{replica}'", database, table)
		if own := strings.TrimSpace(stmt[e[4]:e[5]]); own != "" {
			args += ", " + own
		}
		engine := "ENGINE = Replicated" + stmt[e[2]:e[3]] + "(" + args + ")"
		return stmt[:m[5]] + on + stmt[m[5]:e[0]] + engine + stmt[e[1]:], nil
	}
	if m := clusterDDLStmt.FindStringIndex(stmt); m != nil {
		return stmt[:m[1]] + on + stmt[m[1]:], nil
	}
	return "", fmt.Errorf("%s: a statement clickhouse.cluster has no rendering for", firstLine(stmt))
}
